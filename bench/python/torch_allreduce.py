"""torch.distributed allreduce through the rdmakit backend vs gloo, side by side in one run, and DDP step time.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/torch_allreduce.py [--reps 2] [--ranks 2 4]
        [--max-bytes 268435456] [--json bench/results/torch_allreduce.json]

The driver launches every configuration with python3 -m torch.distributed.run, alternating the backends
within each repetition (rep 1: gloo 2 ranks, rdmakit 2 ranks, gloo 4 ranks, ...), then prints markdown
tables: per size, the median over repetitions of each backend's bus bandwidth and time per allreduce and the
median of the per-repetition ratios rdmakit/gloo. Bus bandwidth = bytes * 2(n-1)/n / time (nccl-tests'
definition); time per allreduce = the slowest rank's loop time / iterations (float32, SUM, in place).
Then examples/python/ddp_mlp.py (a wider MLP, --hidden 1024) with each backend: mean step time.
--no-allreduce / --no-ddp run one part only.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DDP_SCRIPT = ROOT / "examples" / "python" / "ddp_mlp.py"
BACKENDS = ("gloo", "rdmakit")


def sizes(max_bytes):
    size, out = 4096, []
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out


def iterations(size):
    # About 64 MiB through each rank per size, at least 3 and at most 200 allreduces.
    return max(3, min(200, (64 << 20) // size))


# ---- one rank --------------------------------------------------------------------------------------------

def worker(backend, max_bytes):
    import torch
    import torch.distributed as dist
    if backend == "rdmakit":
        import rdmakit.distributed  # noqa: F401
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    for size in sizes(max_bytes):
        tensor = torch.ones(size // 4, dtype=torch.float32)
        count = iterations(size)
        for _ in range(2):
            dist.all_reduce(tensor)
        dist.barrier()
        began = time.perf_counter()
        for _ in range(count):
            dist.all_reduce(tensor)
        elapsed = torch.tensor([time.perf_counter() - began], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds = elapsed.item() / count
        if rank == 0:
            busbw = size * 2 * (world - 1) / world / seconds
            print("RESULT " + json.dumps({"backend": backend, "ranks": world, "bytes": size, "iterations": count,
                                          "seconds": seconds, "busbw": busbw}), flush=True)
        del tensor
    dist.destroy_process_group()


# ---- the driver ------------------------------------------------------------------------------------------

def launch(nproc, args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # --redirects 2 --tee 2: torch 1.13's launcher fails to parse its default "0" under Python 3.11.
    command = [sys.executable, "-m", "torch.distributed.run", "--redirects", "2", "--tee", "2",
               f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={port}", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def human(size):
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def allreduce_tables(samples, ranks, max_bytes):
    for nproc in ranks:
        print(f"\n### allreduce, {nproc} ranks (float32 SUM; median of repetitions)\n")
        print("| size | gloo busbw MB/s | rdmakit busbw MB/s | busbw ratio | gloo us | rdmakit us | time ratio |")
        print("|---|---|---|---|---|---|---|")
        for size in sizes(max_bytes):
            rows = {b: [s for s in samples if s["backend"] == b and s["ranks"] == nproc and s["bytes"] == size]
                    for b in BACKENDS}
            pairs = list(zip(rows["gloo"], rows["rdmakit"]))  # one pair per repetition
            if not pairs:
                continue
            bw = {b: statistics.median(s["busbw"] for s in rows[b]) / 1e6 for b in BACKENDS}
            us = {b: statistics.median(s["seconds"] for s in rows[b]) * 1e6 for b in BACKENDS}
            bw_ratio = statistics.median(r["busbw"] / g["busbw"] for g, r in pairs)
            time_ratio = statistics.median(r["seconds"] / g["seconds"] for g, r in pairs)
            print(f"| {human(size)} | {bw['gloo']:.0f} | {bw['rdmakit']:.0f} | {bw_ratio:.2f}x | {us['gloo']:.0f} | "
                  f"{us['rdmakit']:.0f} | {time_ratio:.2f}x |")


def ddp_steps(ranks, reps, ddp_args):
    results = []
    for rep in range(reps):
        for nproc in ranks:
            for backend in BACKENDS:
                out = launch(nproc, [str(DDP_SCRIPT), "--backend", backend, *ddp_args])
                step = float(re.search(r"mean step time ([0-9.]+) ms", out).group(1))
                loss = float(re.search(r"final loss ([0-9.]+)", out).group(1))
                results.append({"backend": backend, "ranks": nproc, "rep": rep, "step_ms": step, "loss": loss})
    print(f"\n### DDP step time, examples/python/ddp_mlp.py {' '.join(ddp_args)} (median of repetitions)\n")
    print("| ranks | gloo ms/step | rdmakit ms/step | ratio | final loss gloo / rdmakit |")
    print("|---|---|---|---|---|")
    for nproc in ranks:
        rows = {b: [r for r in results if r["backend"] == b and r["ranks"] == nproc] for b in BACKENDS}
        ms = {b: statistics.median(r["step_ms"] for r in rows[b]) for b in BACKENDS}
        ratio = statistics.median(r["step_ms"] / g["step_ms"] for g, r in zip(rows["gloo"], rows["rdmakit"]))
        print(f"| {nproc} | {ms['gloo']:.2f} | {ms['rdmakit']:.2f} | {ratio:.2f}x | "
              f"{rows['gloo'][0]['loss']:.6f} / {rows['rdmakit'][0]['loss']:.6f} |")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--ddp-args", default="--hidden 1024 --steps 60")
    parser.add_argument("--json", help="write every sample here")
    parser.add_argument("--no-allreduce", action="store_true", help="only the DDP step times")
    parser.add_argument("--no-ddp", action="store_true", help="only the allreduce sweep")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.max_bytes)
        return

    samples, ddp = [], []
    for rep in range(0 if args.no_allreduce else args.reps):
        for nproc in args.ranks:
            for backend in BACKENDS:
                began = time.time()
                out = launch(nproc, [__file__, "--worker", backend, "--max-bytes", str(args.max_bytes)])
                samples += [dict(json.loads(line[len("RESULT "):]), rep=rep)
                            for line in out.splitlines() if line.startswith("RESULT ")]
                print(f"rep {rep} {backend} {nproc} ranks: {time.time() - began:.0f} s", file=sys.stderr)
    if samples:
        allreduce_tables(samples, args.ranks, args.max_bytes)
    if not args.no_ddp:
        ddp = ddp_steps(args.ranks, args.reps, args.ddp_args.split())
    if args.json:
        Path(args.json).write_text(json.dumps({"allreduce": samples, "ddp": ddp}, indent=1))


if __name__ == "__main__":
    main()
