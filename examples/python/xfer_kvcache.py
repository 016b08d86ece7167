#!/usr/bin/env python3
"""Paged KV-cache blocks from a prefill process to a decode process through rdmakit's transfer engine.

The prefill process owns a pool of KV-cache blocks (one block: 16 tokens x 32 layers x 2 (K, V) x 8 heads x
128 dims of bf16 = 2 MiB by default) and publishes it as the segment "kv-pool". The decode process opens the
segment by name and READs the blocks of a random block table into its own pool (a torch tensor when torch is
there, else a numpy array; registered without copying), one batch for the whole table, and checks every block
on arrival. It then WRITEs a block back, which the prefill process checks in its own memory. Then the third
tier (host pools): every other fetched block is evicted to a storage node's NVMe, a writable file segment
("kv-nvme", published by an engine of its own: inside the decode process here, on the storage node in a
deployment; its file in --nvme DIR, default the temporary directory, --nvme off skips it), its slot reused,
and read back on a hit, checked byte for byte again.

    python3 examples/python/xfer_kvcache.py --transport shm --blocks 32
    python3 examples/python/xfer_kvcache.py --transport tcp --blocks 8 --block-kib 256
    python3 examples/python/xfer_kvcache.py --transport shm --gpu    # both pools in CUDA device memory

--gpu: both pools are CUDA device memory (cudaMalloc through the CUDA runtime, exposed zero-copy by
__cuda_array_interface__ as a CUDA tensor or CuPy array would be), so blocks move VRAM -> VRAM along the
transport's device path (shm: CUDA IPC; tcp: staged; verbs: GPUDirect). RDMAKIT_CUDA_RUNTIME names the
runtime (default libcudart.so.13, then .12); tests point it at the fake runtime.

The metadata lives in a builtin server run by the decode process (--metadata redis://... or etcd://... instead).
"""

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from rdmakit import xfer


def block_content(block, size):
    """What block `block` holds: its number in every 8-byte word, then a pattern that differs per block."""
    words = np.arange(size // 8, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(block)
    return words.view(np.uint8)


class DeviceBytes:
    """CUDA device memory from the runtime alone (cudaMalloc), exposed as __cuda_array_interface__ objects: what
    a CUDA torch tensor or CuPy array hands rdmakit. The CPU never touches it: bytes go in and out by cudaMemcpy."""

    runtime = None

    @classmethod
    def load(cls):
        if cls.runtime is None:
            for name in (os.environ.get("RDMAKIT_CUDA_RUNTIME"), "libcudart.so.13", "libcudart.so.12"):
                try:
                    cls.runtime = ctypes.CDLL(name) if name else None
                except OSError:
                    continue
                if cls.runtime:
                    break
            if cls.runtime is None:
                raise SystemExit("--gpu: no CUDA runtime loads (set RDMAKIT_CUDA_RUNTIME)")
            cls.runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            cls.runtime.cudaFree.argtypes = [ctypes.c_void_p]
            cls.runtime.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return cls.runtime

    def __init__(self, nbytes):
        pointer = ctypes.c_void_p()
        if self.load().cudaMalloc(ctypes.byref(pointer), nbytes) != 0:
            raise SystemExit(f"--gpu: cudaMalloc of {nbytes} bytes failed")
        self.ptr, self.nbytes = pointer.value, nbytes
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "strides": None,
                                         "data": (self.ptr, False), "version": 3, "stream": None}

    def __getitem__(self, piece):  # bytes [start, stop) as an object of their own, as tensor[start:stop] is
        start, stop, _ = piece.indices(self.nbytes)
        return DeviceSlice(self, start, stop)

    def upload(self, offset, host):
        host = np.ascontiguousarray(host)
        self.copy(self.ptr + offset, host.ctypes.data, host.nbytes)

    def download(self, offset, nbytes):
        host = np.empty(nbytes, dtype=np.uint8)
        self.copy(host.ctypes.data, self.ptr + offset, nbytes)
        return host

    def copy(self, to, source, nbytes):
        if self.runtime.cudaMemcpy(to, source, nbytes, 4) != 0:  # cudaMemcpyDefault: the pointers say where
            raise SystemExit("--gpu: cudaMemcpy failed")

    def __del__(self):
        if self.runtime is not None:
            self.runtime.cudaFree(self.ptr)


class DeviceSlice:
    def __init__(self, owner, start, stop):
        self.owner = owner  # keeps the allocation alive
        self.__cuda_array_interface__ = {"shape": (stop - start,), "typestr": "|u1", "strides": None,
                                         "data": (owner.ptr + start, False), "version": 3, "stream": None}


def prefill(args):
    store = xfer.open_metadata(args.metadata)
    with xfer.Engine(store, name="prefill", transports=[args.transport]) as engine:
        size = args.blocks * args.block_bytes
        if args.gpu:  # filled from the host, as a model's forward pass would fill it on the GPU
            pool = DeviceBytes(size)
            for block in range(args.blocks):
                pool.upload(block * args.block_bytes, block_content(block, args.block_bytes))
            engine.publish("kv-pool", pool)
            read = pool.download
        else:
            pool = engine.allocate_segment("kv-pool", size)
            for block in range(args.blocks):
                pool[block * args.block_bytes:(block + 1) * args.block_bytes] = block_content(block, args.block_bytes)
            read = lambda start, nbytes: pool[start:start + nbytes]  # noqa: E731
        print("ready", flush=True)
        for line in sys.stdin:  # "check <block> <slot>": the decode process wrote its slot <slot> into <block>
            _, block, slot = line.split()
            start = int(block) * args.block_bytes
            ok = np.array_equal(read(start, args.block_bytes), block_content(1000 + int(slot), args.block_bytes))
            print("write ok" if ok else "write WRONG", flush=True)


def local_pool(size, kind):
    if kind == "gpu":
        return DeviceBytes(size), "CUDA device buffer"
    if kind == "numpy":
        return np.zeros(size, dtype=np.uint8), "numpy array"
    try:
        import torch
        return torch.zeros(size, dtype=torch.uint8), "torch tensor"
    except ImportError:
        return np.zeros(size, dtype=np.uint8), "numpy array"


def as_numpy(pool):
    return pool.numpy() if hasattr(pool, "numpy") else pool


def nvme_tier(args, engine, table, slots):
    """Evicts every other slot (not slot 0, written back above) to the NVMe file segment, reuses the slots, reads
    them back on a hit and checks every byte."""
    evicted = list(range(1, len(table), 2))
    size = args.block_bytes
    with tempfile.TemporaryDirectory(dir=args.nvme) as directory:
        path = os.path.join(directory, "kv-nvme.bin")
        with open(path, "wb") as file:
            file.truncate(max(1, len(evicted)) * size)
        with xfer.Engine(xfer.open_metadata(args.metadata), name="storage", transports=[args.transport]) as storage:
            storage.publish_file("kv-nvme", path, writable=True)
            nvme = engine.open_segment("kv-nvme")
            engine.submit([(xfer.WRITE, slots[s], nvme, n * size) for n, s in enumerate(evicted)]).wait(timeout=120)
            for s in evicted:
                as_numpy(slots[s])[:] = 0xA5  # the slot is reused by another sequence
            engine.submit([(xfer.READ, slots[s], nvme, n * size) for n, s in enumerate(evicted)]).wait(timeout=120)
            for s in evicted:
                if not np.array_equal(as_numpy(slots[s]), block_content(int(table[s]), size)):
                    raise SystemExit(f"block {table[s]} (slot {s}) came back from NVMe wrong")
    print(f"{len(evicted)} blocks evicted to NVMe (writable file segment 'kv-nvme') and read back on a hit: "
          "every byte checked")


def decode(args):
    server = None
    if args.metadata is None:
        server = xfer.serve_metadata()
        args.metadata = server.url
    command = [sys.executable, __file__, "--role", "prefill", "--metadata", args.metadata, "--transport",
               args.transport, "--blocks", str(args.blocks), "--block-kib", str(args.block_bytes >> 10)]
    command += ["--gpu"] if args.gpu else []
    owner = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "ready", "the prefill process did not start"
        with xfer.Engine(xfer.open_metadata(args.metadata), name="decode", transports=[args.transport]) as engine:
            table = np.random.default_rng(args.seed).permutation(args.blocks)[:args.table]  # slot -> block
            pool, kind = local_pool(len(table) * args.block_bytes, "gpu" if args.gpu else args.local)
            engine.register_local(pool)
            segment = engine.open_segment("kv-pool")
            slots = [pool[s * args.block_bytes:(s + 1) * args.block_bytes] for s in range(len(table))]
            started = time.perf_counter()
            batch = engine.submit([(xfer.READ, slots[s], segment, int(b) * args.block_bytes)
                                   for s, b in enumerate(table)])
            batch.wait(timeout=120)
            seconds = time.perf_counter() - started
            for s, b in enumerate(table):
                got = pool.download(s * args.block_bytes, args.block_bytes) if args.gpu else as_numpy(slots[s])
                if not np.array_equal(got, block_content(int(b), args.block_bytes)):
                    raise SystemExit(f"block {b} (slot {s}) arrived wrong")
            moved = len(table) * args.block_bytes
            print(f"{len(table)} blocks of {args.block_bytes >> 10} KiB into a {kind} over {segment.transport}: "
                  f"{moved / seconds / 1e9:.2f} GB/s, every block checked")
            # And back: decode's slot 0, rewritten, into the prefill pool's block table[0].
            if args.gpu:
                pool.upload(0, block_content(1000, args.block_bytes))
            else:
                as_numpy(slots[0])[:] = block_content(1000, args.block_bytes)
            engine.submit([(xfer.WRITE, slots[0], segment, int(table[0]) * args.block_bytes)]).wait(timeout=120)
            owner.stdin.write(f"check {table[0]} 0\n")
            owner.stdin.flush()
            if owner.stdout.readline().strip() != "write ok":
                raise SystemExit("the block written back arrived wrong")
            if not args.gpu and args.nvme != "off":  # this example checks the tier's slots as numpy arrays
                nvme_tier(args, engine, table, slots)
            print("OK: every block checked on arrival, and the write back landed")
    finally:
        owner.stdin.close()
        owner.wait(timeout=60)
        if server:
            server.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["decode", "prefill"], default="decode")
    parser.add_argument("--transport", default="shm", help="shm, tcp or verbs")
    parser.add_argument("--metadata", help="metadata URL (default: a builtin server run by the decode process)")
    parser.add_argument("--blocks", type=int, default=32, help="blocks in the prefill pool")
    parser.add_argument("--table", type=int, default=16, help="blocks the decode process fetches")
    parser.add_argument("--block-kib", type=int, default=2048, help="bytes per block / 1024 (2 MiB: 16x32x2x8x128 bf16)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--local", choices=["torch", "numpy"], default="torch",
                        help="the decode pool: a torch tensor (when torch imports) or a numpy array")
    parser.add_argument("--gpu", action="store_true",
                        help="both pools in CUDA device memory (VRAM -> VRAM; RDMAKIT_CUDA_RUNTIME names the runtime)")
    parser.add_argument("--nvme", help="directory of the NVMe tier's file (default: the temporary directory); off: "
                        "no NVMe tier")
    args = parser.parse_args()
    args.block_bytes = args.block_kib << 10
    args.table = min(args.table, args.blocks)
    prefill(args) if args.role == "prefill" else decode(args)


if __name__ == "__main__":
    main()
