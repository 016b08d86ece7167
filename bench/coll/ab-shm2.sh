#!/bin/bash
# A/B of two rdmakit builds on the same allreduce: 2 ranks on one host (shm), 4 KiB / 64 KiB / 1 MiB,
# 2000 iterations each, the builds alternating for 5 repetitions. Each build dir holds tools/rdmakit-coll-perf
# and librdmakit.so.0 (copied, so that rebuilding during the run changes nothing).
#   bench/coll/ab-shm2.sh <build A> <build B> <out.jsonl>     (labels "old" = A, "new" = B)
set -u
a=$(realpath "$1") b=$(realpath "$2") out=$3
: > "$out"
run() {  # run <label> <dir>
  local port=$((30000 + RANDOM % 20000)) pids=()
  for r in 1 0; do
    LD_LIBRARY_PATH=$2 env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 300 "$2/tools/rdmakit-coll-perf" -b 4096 -e 1048576 -f 16 -n 2000 -J > "/tmp/rkab$r" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  sed "s/^{/{\"label\":\"$1\",\"rep\":$rep,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" /tmp/rkab0 | grep '^{' >> "$out"
}
for rep in 1 2 3 4 5; do run old "$a"; run new "$b"; done
