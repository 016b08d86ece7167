#!/usr/bin/env bash
# Allreduce on one host, rdmakit over shm vs Open MPI over vader (shared memory), f32 sum, out-of-place,
# 2/4/8 ranks, `reps` repetitions with the two alternating inside each repetition (same timing rules as
# run.sh: rdmakit-coll-perf and mpi_allreduce.cpp time the same loop).
#   bench/coll/run-shm.sh <rdmakit build dir> [max bytes] [reps] [ranks...]  -> bench/coll/results-shm.jsonl
#   /usr/bin/python3 bench/coll/summarize-reps.py bench/coll/results-shm.jsonl   (medians, markdown)
# TRANSPORT=tcp compares rdmakit over tcp (loopback) with Open MPI's tcp BTL instead -> results-tcp.jsonl.
set -euo pipefail
build=$(realpath "${1:-build}")
max=${2:-67108864}
reps=${3:-3}
shift 3 || true
ranks=("$@")
[ ${#ranks[@]} -eq 0 ] && ranks=(2 4 8)
here=$(dirname "$(realpath "$0")")
transport=${TRANSPORT:-shm}
btl=$([ "$transport" = tcp ] && echo tcp || echo vader)
out=$here/results-$transport.jsonl
source "$here/peers.sh"
one_host_setup "$here" "$build"
: >"$out"
tag() { sed "s/^{/{\"label\":\"$1\",\"rep\":$rep,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" | grep '^{' >>"$out"; }
for rep in $(seq 1 "$reps"); do
  for np in "${ranks[@]}"; do
    echo "== rep $rep, $np ranks (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "${mpi[@]}" -np "$np" -x RDMAKIT_COLL_LOCAL_TRANSPORT="$transport" "$perf" -b 4096 -e "$max" -f 4 -J |
      tag "rdmakit-$transport"
    "${mpi[@]}" -np "$np" --mca btl "self,$btl" "$work/mpi_allreduce" 4096 "$max" 4 | tag "openmpi-$transport"
  done
done
/usr/bin/python3 "$here/summarize-reps.py" "$out"
