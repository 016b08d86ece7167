#!/bin/sh
# Issue #29's verbs rows on two thread placements: rdmakit-perf vs perftest 8-byte latencies (READ, SEND,
# atomic, and WRITE for reference) on one Soft-RoCE device in the QEMU VM (tests/softroce), alternating,
# REPS repetitions, unpinned and split (server on guest CPU 0, client on CPU 1). Under TCG only the ratios
# mean anything. Prints every RESULT line, then the medians and the ratios per placement.
#   bench/verbs-placements.sh [REPS=5]        BUILD: a build with the verbs transport (default build/)
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=$(cd "${BUILD:-$repo/build}" && pwd)
perf="$build/tools/rdmakit-perf"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "HOST load at start: $(cat /proc/loadavg)"
files=""
for t in ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat taskset; do files="$files --file $t"; done
# shellcheck disable=SC2086
"$repo/tests/softroce/run-in-vm.sh" --timeout "${TIMEOUT:-2400}" --file "$perf" --file "$here/verbs-guest.sh" $files \
  --env PERF="$perf" --env REPS="${1:-5}" --env SIZES=8 --env PLACEMENTS="unpinned split" \
  --env TESTS="read_lat send_lat atomic_lat write_lat" -- "$here/verbs-guest.sh" | tee "$log"
echo "HOST load at end: $(cat /proc/loadavg)"
/usr/bin/python3 - "$log" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1], errors="replace"):
    f = line.split()
    if len(f) == 7 and f[0] == "RESULT":
        try:
            rows.setdefault((f[6], f[3], f[2]), []).append(float(f[5]))
        except ValueError:
            pass
print("| placement | test (8 B) | rdmakit-perf median us | perftest median us | ratio | runs |")
print("|---|---|---|---|---|---|")
for placement in ("unpinned", "split"):
    for test in ("read_lat", "send_lat", "atomic_lat", "write_lat"):
        r, p = rows.get((placement, test, "rdmakit"), []), rows.get((placement, test, "perftest"), [])
        if r and p:
            print(f"| {placement} | {test} | {statistics.median(r):.2f} | {statistics.median(p):.2f} | "
                  f"{statistics.median(r) / statistics.median(p):.2f}x | {len(r)} / {len(p)} |")
PY
