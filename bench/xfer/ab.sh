#!/bin/bash
# Transfer engine A/B on shm: an earlier build (BASE) against this one (BUILD), with rdmakit-perf write_bw of
# this build as the peer, interleaved per repetition (perf, base, this). One request per block-sized slot,
# every request of a batch on the same slot (nothing coalesces), one batch at a time.
#   BASE=/path/to/old/build BUILD=build bench/xfer/ab.sh [reps] [seconds]
set -u
reps=${1:-5} secs=${2:-2}
build=${BUILD:-build} base=${BASE:?BASE=<an earlier build directory>}
port=19300
raw() {  # raw <size> -> GB/s
  port=$((port + 1))
  "$build"/tools/rdmakit-perf write_bw --transport shm -p $port > /dev/null 2>&1 &
  local server=$!
  sleep 0.3
  "$build"/tools/rdmakit-perf write_bw 127.0.0.1 --transport shm -p $port -s "$1" -D "$secs" --mode poll --csv \
    2>/dev/null | awk -F, 'NR==2 {print $8/1000}'
  wait $server
}
engine() {  # engine <build> <block> <batch> -> GB/s
  "$1"/tools/rdmakit-xfer-bench --transport shm --block "$2" --batch "$3" --segment "$2" --duration "$secs" \
    2>/dev/null | awk -F'|' '$2 ~ /shm/ && $8+0 > 0 {print $8+0}'
}
echo "uptime: $(uptime)"
for config in "16384 256" "65536 16" "1048576 4"; do
  set -- $config
  for r in $(seq "$reps"); do
    echo "$1 $2 perf $(raw "$1") base $(engine "$base" "$1" "$2") this $(engine "$build" "$1" "$2")"
  done
done
echo "uptime: $(uptime)"
