#!/usr/bin/env bash
# Allreduce across four "hosts" on one machine: network namespaces joined by veth pairs to a bridge
# (netns.sh), one rank per namespace, every byte crossing a veth. rdmakit (tcp between hosts), Gloo (tcp)
# and Open MPI (tcp; mpirun starts its daemons inside the namespaces through netns-rsh.sh), f32 sum,
# out-of-place, the sizes and timing rules of run.sh, alternating per repetition.
#   bench/coll/run-netns.sh <rdmakit build dir> [max bytes] [repetitions]   -> bench/coll/results-netns.jsonl
# Needs root; installs Open MPI and Gloo from Debian if missing (peers.sh).
set -euo pipefail
build=$(realpath "${1:-build}")
max=${2:-268435456}
reps=${3:-1}
here=$(dirname "$(realpath "$0")")
out=$here/results-netns.jsonl
work=$(mktemp -d)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
source "$here/peers.sh"
build_peers "$here" "$work"
"$here/netns.sh" up
# The bridge's own address lets mpirun (in the initial namespace) reach the daemons it starts.
ip addr add 169.254.77.254/24 dev rkc-br 2>/dev/null || true
hosts=$work/hosts
for i in 0 1 2 3; do echo "rdmakit-coll$i slots=1"; done >"$hosts"
net=169.254.77.0/24
mpi=(mpirun --allow-run-as-root -np 4 --hostfile "$hosts" --mca plm_rsh_agent "$here/netns-rsh.sh"
     --mca oob_tcp_if_include "$net" --mca btl_tcp_if_include "$net" --mca btl self,tcp)
: >"$out"
tag() { sed "s/^{/{\"label\":\"$1\",\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" >>"$out"; }
for rep in $(seq 1 "$reps"); do
  echo "== repetition $rep (load $(cut -d' ' -f1-3 /proc/loadavg))"
  RDMAKIT_TRANSPORT=tcp "$here/netns.sh" run "$build/tools/rdmakit-coll-perf" -b 4096 -e "$max" -f 4 -J |
    tag rdmakit-tcp-netns
  "${mpi[@]}" "$work/mpi_allreduce" 4096 "$max" 4 | tag openmpi-tcp-netns
  rm -rf "$work/gloo" && mkdir "$work/gloo"
  "$here/netns.sh" run-gloo "$work/gloo_allreduce" 4096 "$max" 4 "$work/gloo" | tag gloo-tcp-netns
done
python3 "$here/summarize.py" "$out"
