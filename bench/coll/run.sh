#!/usr/bin/env bash
# Allreduce comparison on one host: rdmakit (shm and tcp) vs Open MPI (shared memory and tcp) vs Gloo
# (tcp), f32 sum, out-of-place, same sizes and timing rules (see rdmakit-coll-perf.cpp), 2/4/8 ranks.
#   bench/coll/run.sh <rdmakit build dir> [max bytes] [ranks...]    -> bench/coll/results.jsonl
# Installs Open MPI and Gloo from Debian if missing (peers.sh). Runs as root (--allow-run-as-root).
set -euo pipefail
build=$(realpath "${1:-build-coll-shm}")
max=${2:-268435456}
shift 2 || true
ranks=("${@:-2 4 8}")
[ $# -eq 0 ] && ranks=(2 4 8)
here=$(dirname "$(realpath "$0")")
out=$here/results.jsonl
source "$here/peers.sh"
one_host_setup "$here" "$build"
: >"$out"
tag() { sed "s/^{/{\"label\":\"$1\",\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" >>"$out"; }
for np in "${ranks[@]}"; do
  echo "== $np ranks (load $(cut -d' ' -f1-3 /proc/loadavg))"
  # Alternate implementations so that a change in machine load hits all of them alike.
  "${mpi[@]}" -np "$np" -x RDMAKIT_COLL_LOCAL_TRANSPORT=shm "$perf" -b 4096 -e "$max" -f 4 -J | tag rdmakit-shm
  "${mpi[@]}" -np "$np" --mca btl self,vader "$work/mpi_allreduce" 4096 "$max" 4 | tag openmpi-shm
  "${mpi[@]}" -np "$np" -x RDMAKIT_COLL_LOCAL_TRANSPORT=tcp "$perf" -b 4096 -e "$max" -f 4 -J | tag rdmakit-tcp
  "${mpi[@]}" -np "$np" --mca btl self,tcp "$work/mpi_allreduce" 4096 "$max" 4 | tag openmpi-tcp
  rm -rf "$work/gloo" && mkdir "$work/gloo"
  "${mpi[@]}" -np "$np" "$work/gloo_allreduce" 4096 "$max" 4 "$work/gloo" | tag gloo-tcp
done
python3 "$here/summarize.py" "$out"
