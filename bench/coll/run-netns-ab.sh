#!/usr/bin/env bash
# The netns comparison of run-netns.sh narrowed to what an A/B of the tcp ring needs: allreduce at 4, 16
# and 64 MiB, 4 ranks in 4 namespaces, one or more rdmakit builds and Gloo, interleaved per repetition
# (so a slow spell of the machine hits every contender alike), each row tagged with its repetition and
# the load average. No Open MPI (it adds minutes and is not the target of the row).
#   bench/coll/run-netns-ab.sh <out.jsonl> <reps> <label>=<rdmakit build dir>[@VAR=value...] [...]
# A contender's @VAR=value suffixes are set for its ranks only (e.g. spin=build@RDMAKIT_COLL_SPIN_US=0);
# RDMAKIT_* variables of the caller's environment reach every contender.
# Needs root. Summarize with bench/coll/summarize-reps.py <out.jsonl>.
set -euo pipefail
out=$(realpath -m "$1")
reps=$2
shift 2
here=$(dirname "$(realpath "$0")")
min=${MIN_BYTES:-4194304}
max=${MAX_BYTES:-67108864}
work=$(mktemp -d)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
source "$here/peers.sh"
build_peers "$here" "$work"
"$here/netns.sh" up
for rep in $(seq 1 "$reps"); do
  echo "== repetition $rep (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for contender in "$@"; do
    parse_contender "$contender"
    env RDMAKIT_TRANSPORT=tcp "${settings[@]}" "$here/netns.sh" run "$build/tools/rdmakit-coll-perf" -b "$min" -e "$max" -f 4 -J |
      tag_rep "rdmakit-$label" "$rep"
  done
  rm -rf "$work/gloo" && mkdir "$work/gloo"
  "$here/netns.sh" run-gloo "$work/gloo_allreduce" "$min" "$max" 4 "$work/gloo" | tag_rep gloo-tcp-netns "$rep"
done
python3 "$here/summarize-reps.py" "$out"
