#!/usr/bin/python3
"""PNG plots from compare.py's JSON: for each test, bandwidth (MB/s) or latency (us) against message size,
one line per system (median over repetitions).

  bench/plot.py bench/results/tcp.json [more.json ...]     writes bench/plots/<name>-<test>.png
"""
import json, os, statistics, sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(path):
    info = json.load(open(path))
    name = os.path.splitext(os.path.basename(path))[0]
    outdir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "plots")
    os.makedirs(outdir, exist_ok=True)
    tests = []
    for s in info["samples"]:
        if s["test"] not in tests:
            tests.append(s["test"])
    written = []
    for test in tests:
        rows = [s for s in info["samples"] if s["test"] == test and s["value"] is not None]
        if not rows:
            continue
        metric = rows[0]["metric"]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        systems = []
        for s in rows:
            if s["system"] not in systems:
                systems.append(s["system"])
        for system in systems:
            sizes = sorted({s["size"] for s in rows if s["system"] == system})
            values = [statistics.median([s["value"] for s in rows if s["system"] == system and s["size"] == z])
                      for z in sizes]
            if metric == "bw":
                values = [v / 1e6 for v in values]
            ax.plot(sizes, values, marker="o", label=system)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bandwidth (MB/s, 10^6 B/s)" if metric == "bw" else "latency, median (us)")
        ax.set_title("%s: %s (%s)" % (name, test, info.get("command", "")[:60]), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        out = os.path.join(outdir, "%s-%s.png" % (name, test))
        fig.tight_layout()
        fig.savefig(out, dpi=90)
        plt.close(fig)
        written.append(out)
    return written


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        for out in plot(p):
            print(out)
