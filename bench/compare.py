#!/usr/bin/python3
"""Side-by-side runs of rdmakit-perf against a peer, in the same run: A B A B ... per size and test,
several repetitions, medians and the ratio of each pair. One JSON file of every sample, and a Markdown
table on stdout.

  bench/compare.py tcp  [--reps N] [--sizes 8,4096,...] [--modes poll,block]
  bench/compare.py shm  ...
Environment: BUILD (default <repo>/build-perf), SERVER_CPU/CLIENT_CPU (taskset, default 0 and 1).
"""
import argparse, datetime, json, os, platform, re, statistics, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", os.path.join(REPO, "build-perf"))
PERF = os.path.join(BUILD, "tools", "rdmakit-perf")
BASELINE = os.path.join(BUILD, "baseline")
SERVER_CPU = os.environ.get("SERVER_CPU", "0")
CLIENT_CPU = os.environ.get("CLIENT_CPU", "1")
_port = [20000 + os.getpid() % 5000]

# rdmakit test -> (UCX test, metric). Latency: rdmakit write_lat/send_lat report half a round trip, as
# ucx_perftest's put_lat/am_lat do; read_bw vs ucp_get is a bandwidth comparison.
PAIRS = [("write_bw", "ucp_put_bw", "bw"), ("read_bw", "ucp_get", "bw"),
         ("write_lat", "ucp_put_lat", "lat"), ("send_lat", "ucp_am_lat", "lat")]
UCX_ENV = {"tcp": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"},
           "shm": {"UCX_TLS": "posix,cma"}}


def next_port():
    _port[0] += 1
    return _port[0]


def iterations(metric, size):
    if metric == "lat":
        return 2000 if size <= 65536 else 200
    return max(32, min(20000, (512 << 20) // max(size, 1)))


def run_pair_processes(server_cmd, client_cmd, env=None, timeout=180):
    full_env = dict(os.environ, **(env or {}))
    server = subprocess.Popen(["taskset", "-c", SERVER_CPU] + server_cmd, env=full_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    try:
        out = subprocess.run(["taskset", "-c", CLIENT_CPU] + client_cmd, env=full_env, capture_output=True,
                             text=True, timeout=timeout)
    finally:
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if out.returncode != 0:
        raise RuntimeError("%s failed: %s %s" % (" ".join(client_cmd), out.stdout[-500:], out.stderr[-500:]))
    return out.stdout


def rdmakit(test, metric, size, transport, mode, before=None):
    """`before`: a directory with an earlier build's rdmakit-perf and librdmakit.so (--before), run the same way."""
    port = str(next_port())
    n = iterations(metric, size)
    common = ["--transport", transport, "--mode", mode, "-p", port]
    warm = ["-w", str(max(8, min(256, n // 4)))] if metric == "bw" else []
    perf = os.path.join(before, "rdmakit-perf") if before else PERF
    env = {"LD_LIBRARY_PATH": before} if before else None
    out = run_pair_processes([perf, test] + common,
                             [perf, test, "127.0.0.1", "-s", str(size), "-n", str(n), "--json"] + common + warm, env=env)
    row = json.loads(out)["results"][0]
    return row["bw_avg_bytes_per_s"] if metric == "bw" else row["lat_median_us"]


def ucx(test, metric, size, transport):
    port = str(next_port())
    n = iterations(metric, size)
    out = run_pair_processes(["ucx_perftest", "-p", port],
                             ["ucx_perftest", "127.0.0.1", "-p", port, "-t", test, "-s", str(size), "-n", str(n),
                              "-w", str(max(8, n // 10))], env=UCX_ENV[transport])
    final = [l for l in out.splitlines() if l.strip().startswith("Final:")]
    if not final:
        raise RuntimeError("ucx_perftest printed no Final line:\n" + out[-800:])
    f = final[0].split()
    # Final: iterations, overhead 50%ile, average, overall, MB/s average, overall, msg/s average, overall
    # MB/s here is MiB/s (bytes / 2^20); the integer msg/s column is too coarse for large messages.
    return float(f[6]) * 1048576 if metric == "bw" else float(f[2])


def baseline_tcp(metric, size, spin=False):
    """spin: both sides of the ping-pong spin on non-blocking recv (the floor of a polling transport)."""
    port = str(next_port())
    if metric == "bw":
        out = run_pair_processes([BASELINE, "tcp-server", port], [BASELINE, "tcp-stream", "127.0.0.1", port, str(size), "1"])
    else:
        mode = "tcp-pingpong-spin" if spin else "tcp-pingpong"
        out = run_pair_processes([BASELINE, "tcp-server", port], [BASELINE, mode, "127.0.0.1", port, str(size), "20000" if spin else "2000"])
    return float(out.strip())


def baseline_memcpy(size):
    out = subprocess.run(["taskset", "-c", CLIENT_CPU, BASELINE, "memcpy", str(size), "1"], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def machine():
    load = open("/proc/loadavg").read().split()[:3]
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "nproc": os.cpu_count(),
            "kernel": platform.release(), "load": " ".join(load), "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}


TEST_ORDER = ["write_bw", "read_bw", "send_bw", "write_lat", "read_lat", "send_lat", "atomic_lat"]


def ingest_verbs(log, out):
    """Turns verbs-guest.sh's RESULT lines (from the VM console) into the same JSON and table."""
    info = {"command": "bench/compare-verbs.sh", "threads": "1 thread per side (both)", "samples": []}
    for line in open(log, errors="replace"):
        f = line.split()
        if f[:1] == ["MACHINE"]:
            info["machine_vm"] = " ".join(f[1:])
        if f[:1] != ["RESULT"] or len(f) < 6:
            continue
        try:
            value = float(f[5])
        except ValueError:
            value = None
        info["samples"].append({"rep": int(f[1]), "system": "rdmakit-poll" if f[2] == "rdmakit" else "perftest",
                                "test": f[3], "peer_test": "ib_" + f[3], "metric": "bw" if f[3].endswith("_bw") else "lat",
                                "size": int(f[4]), "value": value})
    info["machine_host"] = machine()
    json.dump(info, open(out, "w"), indent=1)
    print(summary(info, ["poll"], bw_target=0.95, lat_target=1.05))
    print("\nsamples: %s" % os.path.relpath(out, REPO))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--ingest-verbs":
        return ingest_verbs(sys.argv[2], sys.argv[sys.argv.index("--out") + 1])
    if len(sys.argv) > 2 and sys.argv[1] == "--summarize":
        info = json.load(open(sys.argv[2]))
        modes = sorted({s["system"][8:] for s in info["samples"] if s["system"].startswith("rdmakit-")})
        return print(summary(info, modes))
    ap = argparse.ArgumentParser()
    ap.add_argument("transport", choices=["tcp", "shm"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="8,4096,65536,1048576,16777216")
    ap.add_argument("--modes", default="poll,block")
    ap.add_argument("--tests", default=",".join(p[0] for p in PAIRS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--before", default=None, help="directory with an earlier rdmakit-perf and librdmakit.so: "
                    "measured in the same run as system before-<mode>")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    tests = args.tests.split(",")
    info = {"command": " ".join(sys.argv), "machine_before": machine(), "server_cpu": SERVER_CPU,
            "client_cpu": CLIENT_CPU, "threads": "rdmakit: 1 app thread per side (+1 progress thread per side on tcp); "
            "ucx_perftest: 1 thread per side; baseline: 1 thread per side", "samples": []}
    print("# %s: load before: %s" % (args.transport, info["machine_before"]["uptime"]), file=sys.stderr)
    for rep in range(args.reps):
        for size in sizes:
            for test, peer, metric in PAIRS:
                if test not in tests:
                    continue
                # A B A B: every rdmakit mode, then UCX, then (tcp/shm) the physical ceiling.
                runs = [("rdmakit-" + m, lambda m=m: rdmakit(test, metric, size, args.transport, m)) for m in modes]
                if args.before:
                    runs += [("before-" + m, lambda m=m: rdmakit(test, metric, size, args.transport, m, args.before))
                             for m in modes]
                runs.append(("ucx", lambda: ucx(peer, metric, size, args.transport)))
                if args.transport == "tcp" and test in ("write_bw", "write_lat") and (metric == "bw" or size == 8):
                    runs.append(("tcp-socket", lambda: baseline_tcp(metric, size)))
                if args.transport == "tcp" and test in ("write_lat", "send_lat") and "poll" in modes:
                    runs.append(("tcp-spin", lambda: baseline_tcp(metric, size, spin=True)))
                if args.transport == "shm" and test == "write_bw":
                    runs.append(("memcpy", lambda: baseline_memcpy(size)))
                for system, fn in runs:
                    try:
                        value = fn()
                    except Exception as e:  # a failed run is recorded, not fatal
                        print("FAILED %s %s %d: %s" % (system, test, size, e), file=sys.stderr)
                        value = None
                    info["samples"].append({"rep": rep, "system": system, "test": test, "peer_test": peer,
                                            "metric": metric, "size": size, "value": value})
                    print("rep %d %-14s %-9s %9d %s" % (rep, system, test, size, value), file=sys.stderr)
    info["machine_after"] = machine()
    out = args.out or os.path.join(REPO, "bench", "results", "%s-%s.json" % (args.transport, time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(info, open(out, "w"), indent=1)
    print(summary(info, modes))
    print("\nsamples: %s" % os.path.relpath(out, REPO))


def summary(info, modes, bw_target=1.0, lat_target=1.0):
    """Markdown: per test and size, medians of each system and the median of the per-rep ratios
    (rdmakit / peer; bold where the target is met)."""
    samples = info["samples"]
    keys = sorted({(s["test"], s["size"]) for s in samples}, key=lambda k: (TEST_ORDER.index(k[0]), k[1]))
    systems = []
    for s in samples:
        if s["system"] not in systems:
            systems.append(s["system"])
    lines = ["| test | bytes | metric | " + " | ".join(systems) + " | " +
             " | ".join("%s/%s" % (m, peer) for m in modes for peer in [x for x in systems if not x.startswith("rdmakit")]) + " |"]
    lines.append("|" + "---|" * (3 + len(systems) + len(modes) * len([x for x in systems if not x.startswith("rdmakit")])))
    for test, size in keys:
        rows = [s for s in samples if s["test"] == test and s["size"] == size]
        metric = rows[0]["metric"]
        unit = "MB/s" if metric == "bw" else "us"
        def med(system):
            v = [s["value"] for s in rows if s["system"] == system and s["value"] is not None]
            return statistics.median(v) if v else None
        def fmt(v):
            return "-" if v is None else ("%.1f" % (v / 1e6) if metric == "bw" else "%.2f" % v)
        cells = [fmt(med(x)) for x in systems]
        ratios = []
        for m in modes:
            for peer in [x for x in systems if not x.startswith("rdmakit")]:
                per_rep = []
                for rep in sorted({s["rep"] for s in rows}):
                    a = [s["value"] for s in rows if s["rep"] == rep and s["system"] == "rdmakit-" + m]
                    b = [s["value"] for s in rows if s["rep"] == rep and s["system"] == peer]
                    if a and b and a[0] and b[0]:
                        per_rep.append(a[0] / b[0])
                if not per_rep:
                    ratios.append("-")
                    continue
                r = statistics.median(per_rep)
                good = r >= bw_target if metric == "bw" else r <= lat_target
                ratios.append(("**%.2fx**" if good else "%.2fx") % r)
        lines.append("| %s | %d | %s | %s | %s |" % (test, size, unit, " | ".join(cells), " | ".join(ratios)))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
