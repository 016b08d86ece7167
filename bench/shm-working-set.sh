#!/usr/bin/env bash
# Issue #29: shm write_bw of small messages with a working set beyond the last-level cache (DRAM figures)
# against the same tool with one reused slot (cache figures) and a one-core memcpy of the same pieces rotating
# over 64 MiB (bench/baseline.cpp: DRAM),
# alternating, REPS repetitions, on two placements (server 0 / client 1, and both on core 0). UCX's
# ucx_perftest has no working-set option, so the peer here is memcpy.
#   bench/shm-working-set.sh [BUILD=build] [SIZE=4096] [WS=256M] [REPS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
size=${2:-4096}
ws=${3:-256M}
reps=${4:-5}
perf=$build/tools/rdmakit-perf
g++ -std=c++20 -O2 -o "$build/baseline" bench/baseline.cpp
port=$((19000 + $$ % 500))
run_perf() {  # server_cpu client_cpu [extra client options...]
  local s=$1 c=$2; shift 2
  taskset -c "$s" "$perf" write_bw --transport shm -p "$port" > /dev/null 2>&1 &
  local server=$!
  sleep 0.3
  taskset -c "$c" "$perf" write_bw 127.0.0.1 --transport shm -p "$port" -s "$size" -n 200000 --json "$@" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(round(r["results"][0]["bw_avg_bytes_per_s"] / 1e9, 2))'
  wait "$server" || true
}
for placement in "0 1" "0 0"; do
  set -- $placement
  echo "== server CPU $1, client CPU $2, $size B messages"
  for rep in $(seq "$reps"); do
    a=$(run_perf "$1" "$2")
    b=$(run_perf "$1" "$2" --working-set "$ws")
    m=$(taskset -c "$2" "$build/baseline" memcpy "$size" 1)
    echo "rep $rep  one slot: $a GB/s  working set $ws: $b GB/s  memcpy (one core, $size B pieces rotating over 64 MiB): $(awk -v m="$m" 'BEGIN {printf "%.2f", m / 1e9}') GB/s  load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
