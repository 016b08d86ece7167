#!/usr/bin/env python3
"""Medians over repetitions of bench/coll/*.jsonl rows (run-shm.sh): busbw and time per label, and the
median of the per-repetition ratios rdmakit/peer, as markdown tables for bench/RESULTS.md."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
cells = defaultdict(list)  # (ranks, bytes, label) -> rows over repetitions
for r in rows:
    cells[(r["ranks"], int(r["bytes"]), r["label"])].append(r)
labels = sorted({r["label"] for r in rows})
ours_all = [l for l in labels if l.startswith("rdmakit")]
ours = ours_all[0]
peers = [l for l in labels if not l.startswith("rdmakit")]
# Several rdmakit labels (an A/B of builds): each gets its ratios against every peer; with no peer in
# the file (run-onehost-ab.sh), against the first rdmakit label.
pairs = [(o, p) for o in ours_all for p in peers] or [(o, ours) for o in ours_all[1:]]


def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


for n in sorted({r["ranks"] for r in rows}):
    print(f"\n#### {n} ranks: busbw GB/s (time µs), median of repetitions\n")
    head = "| size | " + " | ".join(labels) + " | " + " | ".join(f"{o}/{p}" for o, p in pairs) + " | reps | wrong |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for b in sorted({r["bytes"] for r in rows if r["ranks"] == n}):
        line = [size(b)]
        for l in labels:
            got = cells.get((n, b, l), [])
            line.append(f"{statistics.median(c['busbw_gbs'] for c in got):.3f} "
                        f"({statistics.median(c['time_us'] for c in got):.0f})" if got else "-")
        for o, p in pairs:
            mine = {c["rep"]: c["busbw_gbs"] for c in cells.get((n, b, o), [])}
            theirs = {c["rep"]: c["busbw_gbs"] for c in cells.get((n, b, p), [])}
            ratios = [mine[k] / theirs[k] for k in mine if k in theirs and theirs[k] > 0]
            line.append(f"{statistics.median(ratios):.2f}x" if ratios else "-")
        reps = len(cells.get((n, b, ours), []))
        wrong = sum(int(c["wrong"]) for l in labels for c in cells.get((n, b, l), []))
        line += [str(reps), str(wrong)]
        print("| " + " | ".join(line) + " |")
