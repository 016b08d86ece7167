#!/bin/sh
# rdmakit-perf vs perftest (ib_*_bw, ib_*_lat) on one Soft-RoCE device in the QEMU VM of
# tests/softroce (read its README). Under TCG only the ratios mean anything.
#   bench/compare-verbs.sh [REPS] [SIZES]      e.g. bench/compare-verbs.sh 3 "8 4096 65536"
# Needs a build with the verbs transport: BUILD (default <repo>/build-perf-all).
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=$(cd "${BUILD:-$repo/build-perf-all}" && pwd)
perf="$build/tools/rdmakit-perf"
[ -x "$perf" ] || { echo "compare-verbs: build $perf first (cmake with RDMAKIT_WITH_VERBS=ON)" >&2; exit 1; }
log=$(mktemp)
echo "HOST load at start: $(cat /proc/loadavg)"
files=""
for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
  files="$files --file $t"
done
# shellcheck disable=SC2086
"$repo/tests/softroce/run-in-vm.sh" --timeout "${TIMEOUT:-3000}" --file "$perf" --file "$here/verbs-guest.sh" $files \
  --env PERF="$perf" --env REPS="${1:-3}" --env SIZES="${2:-8 4096 65536 1048576}" \
  -- "$here/verbs-guest.sh" | tee "$log"
out="$repo/bench/results/verbs-$(date +%Y%m%d-%H%M%S).json"
mkdir -p "$repo/bench/results"
/usr/bin/python3 "$here/compare.py" --ingest-verbs "$log" --out "$out"
echo "HOST load at end: $(cat /proc/loadavg)"
