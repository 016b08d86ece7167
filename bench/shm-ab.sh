#!/bin/sh
# A/B of shm WRITE bandwidth between builds, next to one-core memcpy, alternating in one run (A B ... memcpy,
# repeated), pinned (server CPU 0, client CPU 1), poll mode. Prints one line per sample and the medians.
#   bench/shm-ab.sh REPS SIZE DIR...     each DIR holds an rdmakit-perf and its librdmakit.so
# e.g. bench/shm-ab.sh 3 268435456 build /tmp/base   (DIR = a build tree: tools/rdmakit-perf is used)
# Needs build/baseline (bench/compare-shm.sh compiles it) for the memcpy column.
set -e
reps=$1 size=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
baseline=${BASELINE:-$here/../build/baseline}
n=$((size >= 268435456 ? 16 : 64))
port=$((26000 + $$ % 3000))
out=$(mktemp)
for rep in $(seq 1 "$reps"); do
  for dir in "$@"; do
    perf=$dir/rdmakit-perf
    [ -x "$perf" ] || perf=$dir/tools/rdmakit-perf
    port=$((port + 1))
    LD_LIBRARY_PATH=$dir taskset -c 0 "$perf" write_bw --transport shm --mode poll -p $port > /dev/null 2>&1 &
    sleep 0.3
    bw=$(LD_LIBRARY_PATH=$dir taskset -c 1 "$perf" write_bw 127.0.0.1 --transport shm --mode poll -p $port \
      -s "$size" -n $n -w 4 --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["bw_avg_bytes_per_s"])')
    wait
    echo "$rep $dir $bw" | tee -a "$out"
  done
  echo "$rep memcpy $(taskset -c 1 "$baseline" memcpy "$size" 1)" | tee -a "$out"
done
echo "medians (GB/s), $size bytes:"
/usr/bin/python3 - "$out" << 'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    rep, who, bw = line.split()
    rows.setdefault(who, []).append(float(bw) / 1e9)
for who, v in rows.items():
    print("  %-40s %6.2f  (%s)" % (who, statistics.median(v), " ".join("%.2f" % x for x in v)))
EOF
rm -f "$out"
