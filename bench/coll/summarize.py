#!/usr/bin/env python3
"""Turns bench/coll/*.jsonl into the markdown tables of bench/RESULTS.md (rdmakit vs peers, with ratios)."""
import json
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
by = defaultdict(dict)
for r in rows:
    by[(r["label"].split("-")[-1] if "netns" not in r["label"] else "netns", r["ranks"], int(r["bytes"]))][r["label"]] = r


def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


for medium in ("shm", "tcp", "netns"):
    keys = sorted(k for k in by if k[0] == medium)
    if not keys:
        continue
    labels = sorted({l for k in keys for l in by[k]})
    ours = [l for l in labels if l.startswith("rdmakit")]
    peers = [l for l in labels if not l.startswith("rdmakit")]
    for n in sorted({k[1] for k in keys}):
        print(f"\n#### {medium}, {n} ranks: busbw GB/s (time µs)\n")
        head = "| size | " + " | ".join(labels) + " | " + " | ".join(f"{ours[0]}/{p}" for p in peers) + " | wrong |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for k in [k for k in keys if k[1] == n]:
            cells = by[k]
            line = [size(k[2])]
            for l in labels:
                c = cells.get(l)
                line.append(f"{c['busbw_gbs']:.3f} ({c['time_us']:.0f})" if c else "-")
            for p in peers:
                a, b = cells.get(ours[0]), cells.get(p)
                line.append(f"{a['busbw_gbs'] / b['busbw_gbs']:.2f}x" if a and b and b["busbw_gbs"] > 0 else "-")
            line.append(str(sum(int(c["wrong"]) for c in cells.values())))
            print("| " + " | ".join(line) + " |")
