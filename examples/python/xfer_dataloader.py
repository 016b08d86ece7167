#!/usr/bin/env python3
"""A data loader over remote NVMe: dataset shards published as transfer-engine file segments, read by trainer
processes in random batches with prefetch, every sample checked against the dataset's checksum table.

The storage node (this process) writes a directory of shard files (fixed-size samples, deterministic
contents, the same as examples/xfer_dataloader.cpp writes) and checksums.bin, publishes the directory with
``Engine.publish_directory("dataset", dir)`` (each file a read-only file segment "dataset/<name>") and
starts ``--trainers`` trainer processes, as other nodes would be. Each trainer iterates a
:class:`ShardLoader`: batches of ``--batch`` random samples, one ``submit`` of a READ per sample into
registered host memory, the next batch submitted before the current one is checked and yielded (two batches
in flight), as a numpy array of shape (batch, sample bytes) or, with ``--torch``, a torch tensor sharing it.

    python3 examples/python/xfer_dataloader.py --transport tcp --trainers 2
    python3 examples/python/xfer_dataloader.py --transport shm --torch
    python3 examples/python/xfer_dataloader.py --source fromfile     # numpy.fromfile of the shards, no engine
    python3 examples/python/xfer_dataloader.py --source socket       # a plain TCP server of the same files

--source fromfile and socket are the benchmark's baselines (bench/xfer/dataloader.sh): the same batches and
checks, read locally with numpy.fromfile, or from a minimal TCP server that sends asked byte ranges.
--gpu is not offered by this example (it checks every sample in host memory; the engine itself READs file
segments into device memory too); a trainer copies each checked batch to the device (torch: ``tensor.to("cuda", non_blocking=True)`` from the pinned buffer).
Each trainer prints one ``RESULT {json}`` line; the storage node prints the total and "OK" when every sample
of every trainer was right.
"""

import argparse
import json
import os
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

MAGIC = 0x6461746173657431  # "dataset1", as in examples/xfer_dataloader.cpp
PREFIX = "dataset"
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def shard_name(shard):
    return f"shard-{shard:03d}.bin"


def sample_words(first, count, words):
    """Samples first .. first + count - 1 as a (count, words) uint64 array: splitmix64 of each word's position,
    the sample's number in word 0 (the C++ example's sample_word)."""
    s = np.arange(first, first + count, dtype=np.uint64)[:, None]
    z = (s * np.uint64(words) + np.arange(words, dtype=np.uint64)[None, :]) * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    z[:, 0] = s[:, 0]
    return z


def checksums(words):
    """Per row: the sum of the words with odd weights, modulo 2**64 (the C++ example's checksum)."""
    weights = GOLDEN + np.uint64(2) * np.arange(words.shape[1], dtype=np.uint64)
    return (words * weights).sum(axis=1, dtype=np.uint64)


def write_dataset(directory, shards, samples, sample_bytes):
    words = sample_bytes // 8
    table = np.zeros(4 + shards * samples, dtype=np.uint64)
    table[:4] = [MAGIC, shards, samples, sample_bytes]
    for shard in range(shards):
        data = sample_words(shard * samples, samples, words)
        table[4 + shard * samples:4 + (shard + 1) * samples] = checksums(data)
        data.tofile(os.path.join(directory, shard_name(shard)))
    table.tofile(os.path.join(directory, "checksums.bin"))


class Table:
    """The checksum table: shape of the dataset and one checksum per sample."""

    def __init__(self, raw):
        raw = np.frombuffer(raw, dtype=np.uint64)
        if len(raw) < 4 or int(raw[0]) != MAGIC:
            raise SystemExit("checksums.bin: not a dataset table")
        self.shards, self.samples, self.sample_bytes = (int(v) for v in raw[1:4])
        self.sums = raw[4:].copy()
        if len(self.sums) != self.shards * self.samples or self.sample_bytes % 8:
            raise SystemExit("checksums.bin: a table of the wrong size")

    def where(self, sample):
        return sample // self.samples, (sample % self.samples) * self.sample_bytes

    def bad(self, ids, batch):
        """How many samples of `batch` (rows) are not samples `ids`."""
        words = batch.view(np.uint64).reshape(len(ids), -1)
        return int(np.count_nonzero((words[:, 0] != ids) | (checksums(words) != self.sums[ids])))


class EngineSource:
    """The shards as file segments of the storage node's engine: READs into two registered buffers."""

    def __init__(self, engine, table_segment, batch):
        from rdmakit import xfer
        self.xfer, self.engine = xfer, engine
        raw = np.empty(table_segment.length, dtype=np.uint8)
        engine.register_local(raw)
        engine.submit([(xfer.READ, raw, table_segment, 0)]).wait(30)
        self.table = Table(raw.tobytes())
        self.shards = [open_when_published(engine, f"{PREFIX}/{shard_name(s)}") for s in range(self.table.shards)]
        self.buffers = [np.empty((batch, self.table.sample_bytes), dtype=np.uint8) for _ in range(2)]
        for buffer in self.buffers:
            engine.register_local(buffer)

    def start(self, slot, ids):
        """Submits the READs of samples `ids` into buffer `slot` (one submit for the batch)."""
        requests = []
        for row, sample in enumerate(ids):
            shard, offset = self.table.where(int(sample))
            requests.append((self.xfer.READ, self.buffers[slot][row], self.shards[shard], offset))
        return self.engine.submit(requests)

    def finish(self, slot, pending):
        pending.wait(60)  # raises naming every failed request
        return self.buffers[slot]


class FromFileSource:
    """The same shards read locally with numpy.fromfile (the benchmark's bound for a local NVMe)."""

    def __init__(self, directory, batch):
        self.directory = directory
        self.table = Table(np.fromfile(os.path.join(directory, "checksums.bin"), dtype=np.uint8).tobytes())
        self.buffers = [np.empty((batch, self.table.sample_bytes), dtype=np.uint8) for _ in range(2)]

    def start(self, slot, ids):
        return ids

    def finish(self, slot, ids):
        for row, sample in enumerate(ids):
            shard, offset = self.table.where(int(sample))
            self.buffers[slot][row] = np.fromfile(os.path.join(self.directory, shard_name(shard)), dtype=np.uint8,
                                                  count=self.table.sample_bytes, offset=offset)
        return self.buffers[slot]


class SocketSource:
    """A plain TCP server of the same files: a batch is one message of (shard, offset, length) triples; the
    server answers with the bytes, back to back. The next batch's message goes before this one is read."""

    def __init__(self, address, batch):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(struct.pack("<I", 0))  # the table
        (length,) = struct.unpack("<Q", self.receive(8))
        self.table = Table(self.receive(length))
        self.buffers = [np.empty((batch, self.table.sample_bytes), dtype=np.uint8) for _ in range(2)]

    def receive(self, n, into=None):
        view = memoryview(into if into is not None else bytearray(n)).cast("B")
        got = 0
        while got < n:
            chunk = self.sock.recv_into(view[got:], n - got)
            if chunk == 0:
                raise SystemExit("socket source: the server closed the connection")
            got += chunk
        return view.obj if into is None else into

    def start(self, slot, ids):
        triples = []
        for sample in ids:
            shard, offset = self.table.where(int(sample))
            triples += [shard, offset, self.table.sample_bytes]
        self.sock.sendall(struct.pack("<I", len(ids)) + struct.pack(f"<{len(triples)}Q", *triples))
        return ids

    def finish(self, slot, ids):
        self.receive(len(ids) * self.table.sample_bytes, self.buffers[slot][:len(ids)])
        return self.buffers[slot]


class ShardLoader:
    """Iterates `batches` batches of `batch` random samples: yields (sample ids, data) with data a (batch,
    sample bytes) uint8 numpy array (a torch tensor sharing it with torch=True), every sample checked first.
    Prefetch: batch k + 1 is in flight while batch k is checked and consumed; data is valid until the next
    batch is asked for (its buffer then takes batch k + 2): copy what must outlive it."""

    def __init__(self, source, batch, batches, seed, torch=False):
        self.source, self.batch, self.batches, self.torch = source, batch, batches, torch
        self.random = np.random.default_rng(seed)
        self.bad = 0

    def _ids(self):
        total = self.source.table.shards * self.source.table.samples
        return self.random.integers(0, total, size=self.batch, dtype=np.uint64)

    def __iter__(self):
        ids = [self._ids(), None]
        pending = self.source.start(0, ids[0])
        for k in range(self.batches):
            slot = k % 2
            current = pending
            if k + 1 < self.batches:
                ids[1 - slot] = self._ids()
                pending = self.source.start(1 - slot, ids[1 - slot])
            data = self.source.finish(slot, current)
            bad = self.source.table.bad(ids[slot], data)
            if bad:
                print(f"batch {k}: {bad} samples are wrong", file=sys.stderr)
            self.bad += bad
            if self.torch:
                import torch
                data = torch.from_numpy(data)
            yield ids[slot], data


def open_when_published(engine, name, timeout=30.0):
    from rdmakit import errors
    deadline = time.monotonic() + timeout
    while True:
        try:
            return engine.open_segment(name)
        except errors.NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def trainer(args):
    if args.source == "engine":
        from rdmakit import xfer
        engine = xfer.Engine(xfer.open_metadata(args.metadata, namespace="dataloader"),
                             name=f"trainer-{args.rank}", transports=[args.transport],
                             file_local_reads=not args.via_owner)
        source = EngineSource(engine, open_when_published(engine, f"{PREFIX}/checksums.bin"), args.batch)
    elif args.source == "fromfile":
        source = FromFileSource(args.dir, args.batch)
    else:
        source = SocketSource(args.metadata, args.batch)
    loader = ShardLoader(source, args.batch, args.batches, seed=1000 + args.rank, torch=args.torch)
    start = time.perf_counter()
    seen, kind = 0, None
    for ids, data in loader:
        seen += len(ids)
        kind = type(data).__module__.split(".")[0]  # numpy or torch: what a training step would take
    seconds = time.perf_counter() - start
    print("RESULT " + json.dumps({"rank": args.rank, "source": args.source, "transport": args.transport,
                                  "samples": seen, "bad": loader.bad, "seconds": seconds,
                                  "samples_per_s": seen / seconds, "type": kind}), flush=True)
    return 0 if loader.bad == 0 and seen == args.batch * args.batches else 1


class _RangeHandler(socketserver.BaseRequestHandler):
    """Answers each batch message with the asked byte ranges of the shard files (os.sendfile)."""

    def handle(self):
        files = self.server.files
        conn = self.request
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            head = conn.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return
            (count,) = struct.unpack("<I", head)
            if count == 0:
                table = self.server.table
                conn.sendall(struct.pack("<Q", len(table)) + table)
                continue
            body = conn.recv(24 * count, socket.MSG_WAITALL)
            triples = struct.unpack(f"<{3 * count}Q", body)
            for i in range(count):
                shard, offset, length = triples[3 * i:3 * i + 3]
                while length:
                    sent = os.sendfile(conn.fileno(), files[shard], offset, length)
                    offset, length = offset + sent, length - sent


def serve_files(directory, shards):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _RangeHandler)
    server.daemon_threads = True
    server.files = [os.open(os.path.join(directory, shard_name(s)), os.O_RDONLY) for s in range(shards)]
    with open(os.path.join(directory, "checksums.bin"), "rb") as f:
        server.table = f.read()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def storage(args):
    owned = None
    if not args.dir:
        owned = tempfile.TemporaryDirectory(prefix="rdmakit-dataloader-")
        args.dir = owned.name
    if not args.keep:
        os.makedirs(args.dir, exist_ok=True)
        write_dataset(args.dir, args.shards, args.samples, args.sample_kib * 1024)
    server = engine = None
    if args.source == "engine":
        from rdmakit import xfer
        server = xfer.serve_metadata()
        engine = xfer.Engine(xfer.open_metadata(server.url, namespace="dataloader"), name="storage",
                             transports=[args.transport])
        names = engine.publish_directory(PREFIX, args.dir)
        print(f"storage: published {len(names)} segments ({names[0]} ... {names[-1]})", flush=True)
        where = server.url
    elif args.source == "socket":
        server = serve_files(args.dir, args.shards)
        where = "127.0.0.1:%d" % server.server_address[1]
    else:
        where = ""
    common = [sys.executable, os.path.abspath(__file__), "--role", "trainer", "--metadata", where, "--dir", args.dir,
              "--source", args.source, "--transport", args.transport, "--batch", str(args.batch),
              "--batches", str(args.batches)] + (["--torch"] if args.torch else []) + \
        (["--via-owner"] if args.via_owner else [])
    trainers = [subprocess.Popen(common + ["--rank", str(r)], stdout=subprocess.PIPE, text=True)
                for r in range(args.trainers)]
    results, failed = [], 0
    for process in trainers:
        out, _ = process.communicate(timeout=300)
        failed += process.returncode != 0
        results += [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    total = sum(r["samples_per_s"] for r in results)
    samples = sum(r["samples"] for r in results)
    bad = sum(r["bad"] for r in results)
    kinds = sorted({r["type"] for r in results})
    print("TOTAL " + json.dumps({"source": args.source, "transport": args.transport, "trainers": args.trainers,
                                 "samples": samples, "bad": bad, "samples_per_s": total}), flush=True)
    if engine is not None:
        engine.close()
    if server is not None and args.source == "socket":
        server.shutdown()
    elif server is not None:
        server.close()
    if failed or bad or len(results) != args.trainers:
        print(f"FAIL: {failed} trainers failed, {bad} bad samples", flush=True)
        return 1
    print(f"OK: {args.trainers} trainers read {samples} samples of {args.sample_kib} KiB as {'/'.join(kinds)} "
          f"batches ({args.source}{' over ' + args.transport if args.source == 'engine' else ''}), "
          f"every sample checked: {total:.0f} samples/s", flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=["storage", "trainer"], default="storage")
    parser.add_argument("--source", choices=["engine", "fromfile", "socket"], default="engine")
    parser.add_argument("--transport", choices=["shm", "tcp", "verbs"], default="tcp")
    parser.add_argument("--dir", default="", help="the dataset directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="the shards in --dir are there already")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=64, help="samples per shard")
    parser.add_argument("--sample-kib", type=int, default=64)
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--torch", action="store_true", help="yield torch tensors (sharing the buffers)")
    parser.add_argument("--via-owner", action="store_true",
                        help="every READ goes to the storage node, as from another host (on its host a trainer "
                             "otherwise reads the shard files itself)")
    parser.add_argument("--metadata", default="", help=argparse.SUPPRESS)  # trainers: the store (or server)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.shards, args.samples, args.sample_kib, args.trainers, args.batch, args.batches) < 1:
        parser.error("sizes and counts are >= 1")
    return trainer(args) if args.role == "trainer" else storage(args)


if __name__ == "__main__":
    sys.exit(main())
