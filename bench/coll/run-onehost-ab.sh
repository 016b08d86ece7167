#!/usr/bin/env bash
# run-netns-ab.sh's A/B on one host: rdmakit builds (and option sets) side by side, interleaved per
# repetition, mpirun on loopback as run.sh starts them. For checking that a change aimed at the netns
# row costs nothing on the one-host paths (tcp on loopback, shm's exchange-based collectives).
#   bench/coll/run-onehost-ab.sh <out.jsonl> <reps> <ranks> <label>=<rdmakit build dir>[@VAR=value...] [...]
# MIN_BYTES / MAX_BYTES (default 4-64 MiB) and OP (default allreduce) choose what is timed.
# Summarize with bench/coll/summarize-reps.py <out.jsonl>.
set -euo pipefail
out=$(realpath -m "$1")
reps=$2
np=$3
shift 3
here=$(dirname "$(realpath "$0")")
min=${MIN_BYTES:-4194304}
max=${MAX_BYTES:-67108864}
op=${OP:-allreduce}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_tcp_if_include lo
     --mca oob_tcp_if_include lo -np "$np")
source "$here/peers.sh"
for rep in $(seq 1 "$reps"); do
  echo "== repetition $rep (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for contender in "$@"; do
    parse_contender "$contender"
    exports=()
    for setting in "${settings[@]}"; do exports+=(-x "$setting"); done
    "${mpi[@]}" "${exports[@]}" "$build/tools/rdmakit-coll-perf" -o "$op" -b "$min" -e "$max" -f 4 -J |
      tag_rep "rdmakit-$label" "$rep"
  done
done
python3 "$here/summarize-reps.py" "$out"
