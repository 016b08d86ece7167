#!/usr/bin/python3
"""The allreduce cost model (src/coll/cost_model.cpp, docs/allreduce-model.md): fits alpha (µs per
message), beta (µs per byte moved) and gamma (µs per byte reduced) to rdmakit-coll-perf measurements of each
algorithm forced (bench/coll/run-model.sh), prints predicted vs measured, and predicts 64..1024 ranks at
8 per host on 100 and 400 Gb/s networks (markdown tables and docs/allreduce-model.svg).
    /usr/bin/python3 bench/coll/model.py bench/coll/results-model.jsonl [bench/coll/results-hier.jsonl]
The formulas are those of cost_model.cpp; keep the two in step.
"""
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import nnls


def log2_floor(n):
    return n.bit_length() - 1


def log2_ceil(n):
    return (n - 1).bit_length()


def coefficients(algo, n, s):
    """(messages, bytes moved, bytes reduced) on the critical path of a flat allreduce of s bytes."""
    if n < 2:
        return (0, 0, 0)
    k, p = log2_floor(n), 1 << log2_floor(n)
    f = 0 if p == n else 1
    fold = (2 * f, 2 * f * s, f * s)
    if algo == "ring":
        share = (n - 1) / n
        return (2 * (n - 1), 2 * share * s, share * s)
    if algo == "rd":
        return (k + fold[0], k * s + fold[1], k * s + fold[2])
    share = (p - 1) / p
    return (2 * k + fold[0], 2 * share * s + fold[1], share * s + fold[2])


def cost(link, algo, n, s):
    a, b, c = coefficients(algo, n, s)
    return a * link[0] + b * link[1] + c * link[2]


def tree(link, l, s, reduce):
    return log2_ceil(l) * (link[0] + s * (link[1] + (link[2] if reduce else 0)))


def hierarchical(local, net, l, h, algo, s):
    return tree(local, l, s, True) + cost(net, algo, h, s) + tree(local, l, s, False)


def flat_job(local, net, n, l, algo, s):
    """A flat algorithm over hosts of l consecutive ranks (cost_model.cpp's flat_job_cost)."""
    if n <= l:
        return cost(local, algo, n, s)
    shared = (net[0], net[1] * l, net[2])
    if algo == "ring":
        return cost(net, "ring", n, s)
    k, p = log2_floor(n), 1 << log2_floor(n)
    total = 0 if p == n else 2 * local[0] + 2 * s * local[1] + s * local[2]
    block = s
    for i in range(k):
        d = (1 << i) if algo == "rd" else p >> (i + 1)
        link = local if d < l else shared
        if algo == "rd":
            total += link[0] + s * (link[1] + link[2])
        else:
            block /= 2
            total += 2 * (link[0] + block * link[1]) + block * link[2]
    return total


CORES = 2  # the measuring machine's: ranks beyond it take turns, and every cost stretches by ranks / cores


def crowding(ranks):
    return max(1.0, ranks / CORES)


def load(paths):
    cells = defaultdict(list)
    for path in paths:
        for line in open(path):
            if line.startswith("{"):
                r = json.loads(line)
                cells[(r["label"], int(r["bytes"]))].append(r["time_us"])
    return cells


def reduction_cost():
    import time
    a, b = np.ones(1 << 20, dtype=np.float32), np.ones(1 << 20, dtype=np.float32)
    best = math.inf
    for _ in range(50):
        began = time.perf_counter()
        np.add(a, b, out=a)
        best = min(best, time.perf_counter() - began)
    return best * 1e6 / (4 << 20)


def fit(rows, fixed_gamma=None):
    """rows: (algo, n, bytes, measured µs). Least squares in relative error, non-negative."""
    A, y = [], []
    for algo, n, s, t in rows:
        a, b, c = coefficients(algo, n, s)
        t = t / crowding(n)
        A.append([a / t, b / t] + ([] if fixed_gamma is not None else [c / t]))
        y.append(1 - (c * fixed_gamma / t if fixed_gamma is not None else 0))
    x, _ = nnls(np.array(A), np.array(y))
    return (x[0], x[1], fixed_gamma if fixed_gamma is not None else x[2])


def main():
    cells = load(sys.argv[1:2])
    best = {k: min(v) for k, v in cells.items()}  # least disturbed of the repetitions
    med = {k: statistics.median(v) for k, v in cells.items()}
    shm_rows, tcp_rows = [], []
    for (label, s), t in best.items():
        parts = label.split("-")
        if parts[0] == "shm":
            shm_rows.append((parts[2], int(parts[1]), s, t))
        elif parts[0] == "tcp":
            tcp_rows.append((parts[3], int(parts[2]), s, t))
    # gamma measured directly (fitting it gave 0: the noise hides it): numpy's vectorized f32 add over 4 MiB
    # (three cache-resident arrays, as the 512 KiB chunks are), the same memory-bound loop as src/coll/reduce.cpp.
    gamma = reduction_cost()
    shm = fit(shm_rows, fixed_gamma=gamma)
    tcp = fit(tcp_rows, fixed_gamma=gamma)
    print(f"shm: alpha {shm[0]:.2f} us, beta {shm[1]*1e3:.4f} us/KB ({1/shm[1]/1e3 if shm[1] else 0:.2f} GB/s), "
          f"gamma {shm[2]*1e3:.4f} us/KB ({1/shm[2]/1e3 if shm[2] else 0:.2f} GB/s)")
    print(f"tcp: alpha {tcp[0]:.2f} us, beta {tcp[1]*1e3:.4f} us/KB ({1/tcp[1]/1e3 if tcp[1] else 0:.2f} GB/s)")
    print("\n| measured | ranks | algorithm | size | measured µs (best / median of reps) | predicted µs | predicted / best |")
    print("|---|---|---|---|---|---|---|")
    errors = defaultdict(list)
    for (label, s) in sorted(best, key=lambda k: (k[0], k[1])):
        parts = label.split("-")
        if parts[0] == "shm":
            where, n, algo, link = "shm", int(parts[1]), parts[2], shm
        elif parts[0] == "tcp":
            where, n, algo, link = "tcp netns", int(parts[2]), parts[3], tcp
        else:
            continue
        p = cost(link, algo, n, s) * crowding(n)
        ratio = p / best[(label, s)]
        errors[(where, n)].append(abs(math.log(ratio)))
        size = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
        print(f"| {where} | {n} | {algo} | {size} | {best[(label, s)]:.0f} / {med[(label, s)]:.0f} | {p:.0f} | {ratio:.2f} |")
    print("\n| measured | ranks | typical factor between prediction and best measurement (geometric mean) |")
    print("|---|---|---|")
    for (where, n), e in sorted(errors.items()):
        print(f"| {where} | {n} | {math.exp(statistics.mean(e)):.2f}x |")
    if len(sys.argv) > 2:
        hier = load(sys.argv[2:3])
        print("\n| 2 hosts x 2 ranks | size | measured µs (best) | predicted µs | predicted / best |")
        print("|---|---|---|---|---|")
        for (label, s), v in sorted(hier.items()):
            if not label.startswith("rdmakit"):
                continue
            if label == "rdmakit-hier":
                algo = "rd" if s <= 64 << 10 else "ring"
                p = hierarchical(shm, tcp, 2, 2, algo, s) * crowding(4)
            else:
                algo = "rd" if s <= 64 << 10 else ("hd" if s <= 1 << 20 else "ring")
                p = flat_job(shm, tcp, 4, 2, algo, s) * crowding(4)
            print(f"| {label} ({algo}) | {s >> 10} KiB | {min(v):.0f} | {p:.0f} | {p / min(v):.2f} |")
    predict(shm)
    return shm, tcp


def predict(shm):
    # Networks: line rate as beta; alpha 3 µs per message (an RDMA write-with-immediate and its wake-up,
    # an assumption, not measured here); gamma and the local link as measured on shm.
    networks = {"100 Gb/s": (3.0, 1 / 12500.0, shm[2]), "400 Gb/s": (3.0, 1 / 50000.0, shm[2])}
    sizes = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]
    algos = ["ring", "rd", "hd"]
    per_host = 8
    for name, net in networks.items():
        print(f"\n#### {name} network, {per_host} ranks per host: predicted time (µs) of the best plan, and the plan\n")
        print("| ranks | " + " | ".join(f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" for s in sizes) + " |")
        print("|---" * (len(sizes) + 1) + "|")
        for n in [64, 128, 256, 512, 1024]:
            cells = []
            for s in sizes:
                plans = {f"flat {a}": flat_job(shm, net, n, per_host, a, s) for a in algos}
                plans.update({f"hier {a}": hierarchical(shm, net, per_host, n // per_host, a, s) for a in algos})
                name_best = min(plans, key=plans.get)
                cells.append(f"{plans[name_best]:.0f} ({name_best})")
            print(f"| {n} | " + " | ".join(cells) + " |")
    plot(shm, networks, per_host)


def plot(shm, networks, per_host):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = [2 ** k for k in range(10, 31)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, (name, net) in zip(axes, networks.items()):
        for n, style in [(64, "--"), (1024, "-")]:
            for algo, colour in [("ring", "C0"), ("rd", "C1"), ("hd", "C2")]:
                flat = [s * 2 * (n - 1) / n / flat_job(shm, net, n, per_host, algo, s) / 1e3 for s in sizes]
                ax.plot(sizes, flat, style, color=colour, label=f"flat {algo}, {n} ranks")
            hier = [s * 2 * (n - 1) / n / min(hierarchical(shm, net, per_host, n // per_host, a, s)
                                               for a in ("ring", "rd", "hd")) / 1e3 for s in sizes]
            ax.plot(sizes, hier, style, color="C3", label=f"hierarchical, {n} ranks")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message bytes")
        ax.set_title(f"{name}, {per_host} ranks per host (model)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("predicted bus bandwidth, GB/s")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    out = Path(__file__).resolve().parents[2] / "docs" / "allreduce-model.svg"
    fig.savefig(out)
    print(f"\nplot: {out}")


if __name__ == "__main__":
    main()
