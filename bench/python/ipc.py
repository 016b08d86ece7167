#!/usr/bin/env python3
"""Python IPC of numpy arrays: rdmakit (shm, tcp) against multiprocessing + pickle,
multiprocessing.shared_memory + a copy, and a plain socket, in one run; plus the C++ rdmakit-perf
write_bw on the same transport for the "Python overhead" ratio.

Each method moves an array of SIZE bytes from a sender process into a receiver process; the time is from
the sender starting the transfer to the sender knowing the bytes are in the receiver's memory:
  rdmakit      one-sided WRITEs into the array the receiver registered (chain of 64 MiB WRITEs); the
               last WRITE's completion says every byte is placed (RC ordering). No receiver code runs.
               The receiver's array is a plain numpy array (private memory: on shm the sender's copy goes
               through the kernel, process_vm_writev).
  rdmakit_allocated  the same into memory the receiver got from ctx.allocate() (a shared mapping: on shm the
               sender maps it and copies directly). rdmakit-perf's buffers are allocated ones, so this is the
               like-for-like Python / C++ ratio; the plain-array one says what private memory costs.
  pickle       multiprocessing.Pipe.send(array) / recv() in the receiver, which then acks (8 bytes).
  shm+copy     multiprocessing.shared_memory: the sender copies its array into the shared block and
               signals over a Pipe; the receiver acks (it uses the block in place: one copy in total).
  socket       socket.sendall(memoryview) / recv_into(the receiver's array) over a socketpair (AF_UNIX)
               for the shm comparison and TCP loopback for the tcp one, then an 8-byte ack.
"rdmakit pipelined" posts `reps` transfers back to back and waits once, as rdmakit-perf write_bw keeps
many WRITEs in flight: that is the figure compared with the C++ tool.
Methods run alternately (A B C D, repeated), and the median over the repetitions is reported.

    /usr/bin/python3 bench/python/ipc.py --perf build/tools/rdmakit-perf [--sizes 1M,64M,1G] [--json out.json]
"""

import argparse
import json
import multiprocessing as mp
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from multiprocessing import shared_memory

import numpy as np

import rdmakit

CHUNK = 64 << 20


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def label(size):
    return f"{size >> 30} GiB" if size >= 1 << 30 else f"{size >> 20} MiB"


# ---- receivers: each runs in its own process and serves `reps` transfers ---------------------------------

def rdmakit_receiver(pipe, transport, size, allocated):
    with rdmakit.Context(transport=transport) as ctx:
        if allocated:  # memory rdmakit allocates: on shm the sender maps it and copies directly
            region = ctx.allocate(size)
            array = np.frombuffer(region.view(), np.uint8)
        else:  # a private numpy array: on shm the sender's copy goes through the kernel (process_vm_writev)
            array = np.zeros(size, np.uint8)
            region = ctx.register(array)
        listener = ctx.listen()
        pipe.send((listener.address, bytes(region.descriptor)))
        with listener.accept(timeout=60):
            pipe.recv()  # "done": the sender finished; now check the last transfer's bytes in place
            pipe.send(bool(array[0] == 1 and array[-1] == 1 and region.address == array.ctypes.data))


def pickle_receiver(pipe, reps):
    for _ in range(reps):
        array = pipe.recv()
        pipe.send(int(array[-1]))


def shm_receiver(pipe, reps, name, size):
    block = shared_memory.SharedMemory(name=name)
    view = np.ndarray(size, np.uint8, buffer=block.buf)
    for _ in range(reps):
        pipe.recv()
        pipe.send(int(view[-1]))
    del view
    block.close()


def socket_receiver(pipe, reps, size, family, address):
    array = np.zeros(size, np.uint8)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.connect(address)
        view = memoryview(array)
        for _ in range(reps):
            got = 0
            while got < size:
                got += sock.recv_into(view[got:], size - got)
            sock.sendall(b"ack-ack!")


# ---- senders (in this process) ------------------------------------------------------------------------

def spawn(target, *args):
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    process = ctx.Process(target=target, args=(there, *args))
    process.start()
    return process, here


def run_rdmakit(transport, size, reps, data, pipelined, allocated=False):
    process, pipe = spawn(rdmakit_receiver, transport, size, allocated)
    address, descriptor = pipe.recv()
    times = []
    with rdmakit.Context(transport=transport) as ctx:
        local = ctx.register(data, rdmakit.Access.LOCAL_WRITE | rdmakit.Access.REMOTE_READ)
        remote = rdmakit.RemoteRegion.from_bytes(descriptor)
        with ctx.connect(address) as conn:
            chunks = [(o, min(CHUNK, size - o)) for o in range(0, size, CHUNK)]
            chain = [rdmakit.WorkRequest(rdmakit.Opcode.WRITE, local.slice(o, n), remote.at(o),
                                         signaled=(i == len(chunks) - 1)) for i, (o, n) in enumerate(chunks)]
            for _ in range(reps + 1):  # the first one warms up (page faults at the receiver)
                start = time.perf_counter()
                conn.wait(conn.post(chain) + len(chain) - 1, timeout=300)
                times.append(time.perf_counter() - start)
            # Pipelined, as rdmakit-perf write_bw runs: `reps` transfers posted back to back, one wait.
            start = time.perf_counter()
            for _ in range(reps):
                last = conn.post(chain) + len(chain) - 1
            conn.wait(last, timeout=300)
            pipelined.append((time.perf_counter() - start) / reps)
            pipe.send("done")
            placed = pipe.recv()
    process.join()
    if not placed:
        raise RuntimeError("rdmakit: the receiver's array does not hold the bytes")
    return times[1:]


def run_pickle(size, reps, data):
    process, pipe = spawn(pickle_receiver, reps + 1)
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        pipe.send(data)
        pipe.recv()
        times.append(time.perf_counter() - start)
    process.join()
    return times[1:]


def run_shm_copy(size, reps, data):
    block = shared_memory.SharedMemory(create=True, size=size)
    try:
        view = np.ndarray(size, np.uint8, buffer=block.buf)
        process, pipe = spawn(shm_receiver, reps + 1, block.name, size)
        times = []
        for _ in range(reps + 1):
            start = time.perf_counter()
            np.copyto(view, data)
            pipe.send(None)
            pipe.recv()
            times.append(time.perf_counter() - start)
        process.join()
        del view
    finally:
        block.close()
        block.unlink()
    return times[1:]


def run_socket(transport, size, reps, data):
    if transport == "shm":
        path = f"/tmp/rdmakit-bench-{os.getpid()}.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        family, address = socket.AF_UNIX, path
    else:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        family, address = socket.AF_INET, listener.getsockname()
    listener.listen(1)
    process, _ = spawn(socket_receiver, reps + 1, size, family, address)
    conn, _ = listener.accept()
    times = []
    ack = bytearray(8)
    with conn:
        for _ in range(reps + 1):
            start = time.perf_counter()
            conn.sendall(memoryview(data))
            got = 0
            while got < 8:
                got += conn.recv_into(memoryview(ack)[got:])
            times.append(time.perf_counter() - start)
    process.join()
    listener.close()
    if transport == "shm":
        os.unlink(path)
    return times[1:]


def run_perf(perf, transport, size, reps):
    """The C++ rdmakit-perf write_bw on the same transport: its reported GB/s (bandwidth average)."""
    port = 18600 + (os.getpid() % 300)
    env = dict(os.environ, RDMAKIT_TRANSPORT=transport)
    server = subprocess.Popen([perf, "write_bw", "--transport", transport, "-p", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        iterations = max(3, min(1000, (4 << 30) // size))
        client = subprocess.run([perf, "write_bw", "127.0.0.1", "--transport", transport, "-p", str(port), "-s",
                                 str(size), "-n", str(iterations), "--json"], env=env, capture_output=True,
                                text=True, timeout=600)
        if client.returncode != 0:
            return None, client.stderr.strip()
        return json.loads(client.stdout), None
    finally:
        server.wait(timeout=60) if server.poll() is None else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1M,64M,1G")
    parser.add_argument("--transports", default="shm,tcp")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of every method")
    parser.add_argument("--perf", help="path of rdmakit-perf (the C++ ratio); omitted: no ratio")
    parser.add_argument("--json", help="write every measurement here")
    args = parser.parse_args()
    results = []
    for transport in args.transports.split(","):
        for size in map(parse_size, args.sizes.split(",")):
            reps = max(1, min(20, (256 << 20) // size))
            data = np.ones(size, np.uint8)
            pipelined, pipelined_allocated = [], []
            methods = {"rdmakit": lambda: run_rdmakit(transport, size, reps, data, pipelined),
                       "rdmakit_allocated": lambda: run_rdmakit(transport, size, reps, data, pipelined_allocated,
                                                                allocated=True),
                       "pickle": lambda: run_pickle(size, reps, data),
                       "shm+copy": lambda: run_shm_copy(size, reps, data),
                       "socket": lambda: run_socket(transport, size, reps, data)}
            times = {name: [] for name in methods}
            for _ in range(args.rounds):
                for name, run in methods.items():
                    times[name] += run()
            row = {"transport": transport, "size": size,
                   **{name: size / statistics.median(t) / 1e9 for name, t in times.items()},
                   "rdmakit_pipelined": size / statistics.median(pipelined) / 1e9,
                   "rdmakit_allocated_pipelined": size / statistics.median(pipelined_allocated) / 1e9, "reps": reps}
            if args.perf:
                report, error = run_perf(args.perf, transport, size, reps)
                row["cpp_write_bw"] = report_gbps(report) if report else None
                row["cpp_error"] = error
            results.append(row)
            print_row(row)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


def report_gbps(report):
    """GB/s (1e9 bytes/s) of rdmakit-perf's JSON (one row: the size asked for)."""
    rows = report.get("results") or []
    return rows[0]["bw_avg_bytes_per_s"] / 1e9 if rows and "bw_avg_bytes_per_s" in rows[0] else None


def print_row(row):
    cpp = row.get("cpp_write_bw")
    cells = [f"{row['transport']:4}", f"{label(row['size']):>8}"]
    cells += [f"{name} {row[name]:6.2f}" for name in ("rdmakit", "rdmakit_allocated", "pickle", "shm+copy", "socket")]
    cells.append(f"x pickle {row['rdmakit'] / row['pickle']:5.1f}")
    cells.append(f"rdmakit pipelined {row['rdmakit_pipelined']:6.2f}")
    cells.append(f"allocated pipelined {row['rdmakit_allocated_pipelined']:6.2f}")
    if cpp:  # rdmakit-perf's buffers are allocated ones: the allocated column is the like-for-like ratio
        cells.append(f"C++ write_bw {cpp:6.2f} -> python pipelined/C++ {row['rdmakit_pipelined'] / cpp:4.2f}"
                     f", allocated/C++ {row['rdmakit_allocated_pipelined'] / cpp:4.2f}")
    elif row.get("cpp_error"):
        cells.append(f"C++ write_bw failed: {row['cpp_error']}")
    print("  ".join(cells) + "   (GB/s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
