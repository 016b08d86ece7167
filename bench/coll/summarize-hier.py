#!/usr/bin/env python3
"""Markdown table of bench/coll/run-hier.sh's output: per size, the median over repetitions of each
label's bus bandwidth (and time), and the median of the per-repetition ratios hier/flat and hier/gloo."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
cell = defaultdict(list)  # (label, bytes) -> rows over repetitions
for r in rows:
    cell[(r["label"], int(r["bytes"]))].append(r)
labels = ["rdmakit-hier", "rdmakit-flat", "gloo"]
sizes = sorted({b for _, b in cell})


def med(label, size, key):
    values = [r[key] for r in cell.get((label, size), [])]
    return statistics.median(values) if values else None


def ratio(a, b, size):
    reps = {r["rep"]: r["busbw_gbs"] for r in cell.get((b, size), [])}
    values = [r["busbw_gbs"] / reps[r["rep"]] for r in cell.get((a, size), []) if reps.get(r["rep"])]
    return f"{statistics.median(values):.2f}x" if values else "-"


print("| size | " + " | ".join(f"{l} busbw GB/s (µs)" for l in labels) + " | hier/flat | hier/gloo | algorithms | wrong |")
print("|---" * (len(labels) + 5) + "|")
for s in sizes:
    line = [f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"]
    for l in labels:
        b, t = med(l, s, "busbw_gbs"), med(l, s, "time_us")
        line.append(f"{b:.3f} ({t:.0f})" if b is not None else "-")
    line += [ratio("rdmakit-hier", "rdmakit-flat", s), ratio("rdmakit-hier", "gloo", s)]
    algos = sorted({r.get("algorithm", "?") for l in labels[:2] for r in cell.get((l, s), [])})
    line.append(", ".join(algos))
    line.append(str(sum(int(r["wrong"]) for l in labels for r in cell.get((l, s), []))))
    print("| " + " | ".join(line) + " |")
reps = sorted({r["rep"] for r in rows})
loads = [float(r["load"]) for r in rows]
print(f"\n{len(reps)} repetitions; load average at the start of each run: {min(loads):.1f} to {max(loads):.1f}")
