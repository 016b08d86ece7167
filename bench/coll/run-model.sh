#!/usr/bin/env bash
# The measurements the allreduce cost model (docs/allreduce-model.md, bench/coll/model.py) is fitted to
# and checked against: each algorithm forced (RDMAKIT_COLL_ALGO=ring|rd|hd), f32 sum, 4 KiB .. max (x4),
#   * 2, 4 and 8 ranks on one host over shm (torchrun-style launch on loopback);
#   * 4 ranks in 4 network namespaces over tcp (bench/coll/netns.sh, one rank per "host");
#   * 4 ranks in 2 namespaces of 2 (hierarchical on, each algorithm among the leaders): bench/coll/run-hier.sh.
# Repetitions alternate the algorithms. Needs root for the namespaces.
#   bench/coll/run-model.sh <rdmakit build dir> [max bytes] [repetitions] [out.jsonl]
set -euo pipefail
build=$(realpath "${1:-build}")
max=${2:-16777216}
reps=${3:-2}
here=$(dirname "$(realpath "$0")")
out=${4:-$here/results-model.jsonl}
perf=("$build/tools/rdmakit-coll-perf" -b 4096 -e "$max" -f 4 -J)
trap '"$here/netns.sh" down' EXIT
tag() { sed "s/^{/{\"label\":\"$1\",\"rep\":$rep,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" | grep '^{' >>"$out"; }
local_run() {  # local_run <ranks> <algorithm>
  local n=$1 port=$((30000 + RANDOM % 20000)) pids=()
  for r in $(seq $((n - 1)) -1 0); do
    env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RDMAKIT_COLL_ALGO=$2 \
      timeout 900 "${perf[@]}" > "/tmp/rkm-out$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cat /tmp/rkm-out0
}
: >"$out"
"$here/netns.sh" up
for rep in $(seq 1 "$reps"); do
  echo "== repetition $rep (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for algo in ring rd hd; do
    for n in 2 4 8; do local_run "$n" "$algo" | tag "shm-$n-$algo"; done
    RDMAKIT_TRANSPORT=tcp RDMAKIT_COLL_ALGO=$algo "$here/netns.sh" run "${perf[@]}" | tag "tcp-netns-4-$algo"
  done
done
echo "wrote $out"
