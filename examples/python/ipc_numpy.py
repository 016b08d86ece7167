#!/usr/bin/env python3
"""Zero-copy IPC of a numpy array between two Python processes with rdmakit.

The receiver registers the array it wants the data in and sends its 48-byte descriptor to the sender;
the sender WRITEs its array straight into it (one-sided: on shm the sender's process moves the bytes,
on tcp the receiver's progress thread places them from the socket into the array) and ends with a
WRITE-with-immediate, which completes a receive the receiver posted: the "data is there" signal. The
receiver then checks the bytes and that they are in the very array it registered (same object, same
address before and after): nothing was copied into a temporary buffer and handed over.

    /usr/bin/python3 examples/python/ipc_numpy.py --transport shm --size 1G
    /usr/bin/python3 examples/python/ipc_numpy.py --transport tcp --size 64M

Across hosts (tcp, or verbs), start the two sides yourself; the receiver prints the sender's command line:

    host A$ ipc_numpy.py --transport tcp --size 1G --role receiver --listen 10.0.0.1:7471
    host B$ ipc_numpy.py --transport tcp --size 1G --role sender --connect 10.0.0.1:7471 --descriptor <hex>
"""

import argparse
import multiprocessing as mp
import sys
import time

import numpy as np

import rdmakit

CHUNK = 64 << 20  # one WRITE per 64 MiB: under every transport's message limit


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def pattern(size, seed):
    """The bytes both sides agree on (the receiver regenerates them to check)."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def receiver(pipe, transport, size, seed, listen=""):
    with rdmakit.Context(transport=transport) as ctx:
        array = np.zeros(size, np.uint8)
        address_before = array.__array_interface__["data"][0]
        region = ctx.register(array)                     # no copy: the transport writes into `array`
        signal = ctx.register(bytearray(8))
        listener = ctx.listen(listen)
        pipe.send((listener.address, bytes(region.descriptor)))
        with listener.accept(timeout=30) as conn:
            done = conn.wait(conn.post_recv(signal), timeout=120)   # completed by the sender's WRITE_IMM
            same_object = region.obj is array
            address_after = array.__array_interface__["data"][0]
            intact = np.array_equal(array, pattern(size, seed))
            pipe.send({"imm": done.imm, "bytes_ok": intact, "same_object": same_object,
                       "address_before": address_before, "address_after": address_after,
                       "region_address": region.address})


def sender(transport, size, seed, address, descriptor):
    with rdmakit.Context(transport=transport) as ctx:
        data = pattern(size, seed)
        local = ctx.register(data, rdmakit.Access.LOCAL_WRITE | rdmakit.Access.REMOTE_READ)
        remote = rdmakit.RemoteRegion.from_bytes(descriptor)
        with ctx.connect(address) as conn:
            chunks = [(offset, min(CHUNK, size - offset)) for offset in range(0, size, CHUNK)]
            chain = [rdmakit.WorkRequest(rdmakit.Opcode.WRITE, local.slice(o, n), remote.at(o), signaled=False)
                     for o, n in chunks[:-1]]
            last_offset, last_length = chunks[-1]
            chain.append(rdmakit.WorkRequest(rdmakit.Opcode.WRITE_IMM, local.slice(last_offset, last_length),
                                             remote.at(last_offset), imm=seed))
            start = time.perf_counter()
            last = conn.post(chain) + len(chain) - 1
            conn.wait(last, timeout=120)   # RC: the WRITEs before it are placed too
            return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transport", default="shm", choices=["shm", "tcp", "verbs"])
    parser.add_argument("--size", default="64M", help="bytes, with K/M/G (default 64M)")
    parser.add_argument("--role", choices=["both", "receiver", "sender"], default="both")
    parser.add_argument("--listen", default="", help="receiver: host:port to listen on (default loopback)")
    parser.add_argument("--connect", help="sender: the receiver's address")
    parser.add_argument("--descriptor", help="sender: the receiver's descriptor (hex)")
    args = parser.parse_args()
    size, seed = parse_size(args.size), 12345
    if args.role == "receiver":
        return run_receiver_alone(args, size, seed)
    if args.role == "sender":
        descriptor = rdmakit.RemoteRegion.from_hex(args.descriptor).to_bytes()
        seconds = sender(args.transport, size, seed, args.connect, descriptor)
        print(f"{args.transport}: {size} bytes in {seconds * 1e3:.1f} ms ({size / seconds / 1e9:.2f} GB/s)")
        return 0
    spawn = mp.get_context("spawn")
    here, there = spawn.Pipe()
    process = spawn.Process(target=receiver, args=(there, args.transport, size, seed))
    process.start()
    address, descriptor = here.recv()
    seconds = sender(args.transport, size, seed, address, descriptor)
    report = here.recv()
    process.join()
    print(f"{args.transport}: {size} bytes in {seconds * 1e3:.1f} ms ({size / seconds / 1e9:.2f} GB/s)")
    print(f"receiver: bytes intact {report['bytes_ok']}, same array object {report['same_object']}, "
          f"address before {report['address_before']:#x} after {report['address_after']:#x} "
          f"(registered at {report['region_address']:#x}), imm {report['imm']}")
    zero_copy = (report["same_object"] and report["address_before"] == report["address_after"]
                 == report["region_address"])
    ok = report["bytes_ok"] and zero_copy and report["imm"] == seed and process.exitcode == 0
    print("OK: the bytes landed in the receiver's own array, no copy" if ok else "FAILED")
    return 0 if ok else 1


class _PrintingPipe:
    """The receiver's pipe when it runs alone: prints what it would send to the sender process."""

    def __init__(self, args):
        self.args, self.report = args, None

    def send(self, message):
        if isinstance(message, tuple):
            address, descriptor = message
            hex_text = rdmakit.RemoteRegion.from_bytes(descriptor).to_hex()
            print(f"run on the sender: ipc_numpy.py --transport {self.args.transport} --size {self.args.size} "
                  f"--role sender --connect {address} --descriptor {hex_text}", flush=True)
        else:
            self.report = message


def run_receiver_alone(args, size, seed):
    pipe = _PrintingPipe(args)
    receiver(pipe, args.transport, size, seed, args.listen)
    report = pipe.report
    ok = report["bytes_ok"] and report["same_object"] and report["address_before"] == report["address_after"]
    print(f"receiver: bytes intact {report['bytes_ok']}, same array object {report['same_object']}, "
          f"address before {report['address_before']:#x} after {report['address_after']:#x}")
    print("OK: the bytes landed in the receiver's own array, no copy" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
