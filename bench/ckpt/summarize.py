#!/usr/bin/python3
"""Medians and ratios of bench/ckpt/run.sh's rows, as the markdown table of bench/RESULTS.md.

    summarize.py bench/ckpt/results.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    machine = next((r for r in rows if r.get("what") == "machine"), {})
    by = defaultdict(list)  # (size, what) -> rows
    for r in rows:
        if "size_mib" in r:
            by[(r["size_mib"], r["what"])].append(r)
    sizes = sorted({s for s, _ in by})
    print(f"file system: {machine.get('fs', '?')}, {machine.get('cores', '?')} cores, kernel {machine.get('kernel', '?')}")

    def med(size, what, field):
        values = [r[field] for r in by.get((size, what), []) if field in r]
        return (statistics.median(values), len(values)) if values else (None, 0)

    print("| size | what | rdmakit (median) | peer (median) | ratio | target | reps | max load |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        load = max(r["load"] for (s, _), rs in by.items() if s == size for r in rs)

        def line(what, ours, peer, ratio, target, n):
            print(f"| {size} MiB | {what} | {ours} | {peer} | {ratio} | {target} | {n} | {load:.1f} |")

        stall, n = med(size, "rdmakit", "snapshot_stall_ms")
        memcpy, _ = med(size, "rdmakit", "memcpy_ms")
        save, _ = med(size, "rdmakit", "save_ms")
        lazy, nl = med(size, "lazy", "stall_ms")
        lazy_memcpy, _ = med(size, "lazy", "memcpy_ms")
        torch_ret, nt = med(size, "torch", "save_ms")
        torch_dur, _ = med(size, "torch", "durable_ms")
        numpy_ret, nn = med(size, "numpy", "save_ms")
        numpy_dur, _ = med(size, "numpy", "durable_ms")
        persist, _ = med(size, "rdmakit", "persist_GBps")
        write, _ = med(size, "rdmakit", "write_GBps")
        restore, _ = med(size, "rdmakit", "restore_GBps")
        verify, _ = med(size, "rdmakit", "verify_GBps")
        fio_w, nf = med(size, "fio", "write_GBps")
        fio_r, _ = med(size, "fio", "read_GBps")
        checksum, nc = med(size, "checksum", "GBps")
        replica, nr = med(size, "replica", "replica_GBps")
        write_bw, _ = med(size, "write_bw", "GBps")
        if stall is not None:
            line("snapshot() stall vs memcpy", f"{stall:.1f} ms", f"{memcpy:.1f} ms", f"{stall / memcpy:.2f}x", "<= 1.1x", n)
        if lazy is not None:
            line("lazy wait_snapshot() stall vs memcpy", f"{lazy:.3f} ms", f"{lazy_memcpy:.1f} ms",
                 f"{lazy / lazy_memcpy:.4f}x", "<= 0.05x", nl)
        if save is not None and torch_dur is not None:
            line("save, durable (snapshot -> committed) vs torch.save + fsync", f"{save:.0f} ms", f"{torch_dur:.0f} ms",
                 f"{torch_dur / save:.1f}x faster", ">= 3x", min(n, nt))
        if save is not None and numpy_dur is not None:
            line("save, durable vs numpy.save + fsync", f"{save:.0f} ms", f"{numpy_dur:.0f} ms",
                 f"{numpy_dur / save:.1f}x faster", ">= 3x", min(n, nn))
        if stall is not None and torch_ret is not None:
            line("time until training resumes (eager stall) vs torch.save returning", f"{stall:.1f} ms",
                 f"{torch_ret:.0f} ms", f"{torch_ret / stall:.0f}x shorter", ">= 20x", min(n, nt))
        if lazy is not None and torch_ret is not None:
            line("time until training resumes (lazy stall) vs torch.save returning", f"{lazy:.3f} ms",
                 f"{torch_ret:.0f} ms", f"{torch_ret / lazy:.0f}x shorter", ">= 20x", min(nl, nt))
        if stall is not None and numpy_ret is not None:
            line("time until training resumes (eager stall) vs numpy.save returning", f"{stall:.1f} ms",
                 f"{numpy_ret:.0f} ms", f"{numpy_ret / stall:.1f}x shorter", "-", min(n, nn))
        if persist is not None and fio_w is not None:
            line("persist (write + fsyncs + rename) vs fio write", f"{persist:.2f} GB/s", f"{fio_w:.2f} GB/s",
                 f"{persist / fio_w:.2f}x", ">= 0.9x", min(n, nf))
            line("data write alone vs fio write", f"{write:.2f} GB/s", f"{fio_w:.2f} GB/s", f"{write / fio_w:.2f}x", "-", min(n, nf))
        if restore is not None and fio_r is not None:
            line("restore (verify + load) vs fio read", f"{restore:.2f} GB/s", f"{fio_r:.2f} GB/s",
                 f"{restore / fio_r:.2f}x", ">= 0.9x", min(n, nf))
            line("verify alone vs fio read", f"{verify:.2f} GB/s", f"{fio_r:.2f} GB/s", f"{verify / fio_r:.2f}x", "-", min(n, nf))
        if checksum is not None and write is not None:
            line("checksum (one thread) vs the engine's disk writes", f"{checksum:.2f} GB/s", f"{write:.2f} GB/s",
                 f"{checksum / write:.1f}x", ">= 2x", nc)
        if replica is not None and write_bw is not None:
            line("peer-memory replica push vs rdmakit-perf write_bw (4 MiB)", f"{replica:.2f} GB/s",
                 f"{write_bw:.2f} GB/s", f"{replica / write_bw:.2f}x", ">= 0.9x", nr)


if __name__ == "__main__":
    main()
