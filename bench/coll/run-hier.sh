#!/usr/bin/env bash
# Hierarchical vs flat allreduce across two "hosts" of two ranks each: network namespaces rkhb0 and rkhb1
# joined by one veth pair (10.79.0.1 and .2), ranks 0-1 in the first, 2-3 in the second, torchrun-style.
# Per repetition, alternating: rdmakit hierarchical (RDMAKIT_COLL_HIERARCHICAL=on), rdmakit flat (off; the
# algorithm by size as usual), Gloo through torch (tcp for every pair). f32 sum, out-of-place.
#   bench/coll/run-hier.sh <rdmakit build dir> [max bytes] [repetitions] [out.jsonl]
# Needs root. Summarize: python3 bench/coll/summarize-hier.py <out.jsonl>
set -euo pipefail
build=$(realpath "${1:-build}")
max=${2:-67108864}
reps=${3:-3}
here=$(dirname "$(realpath "$0")")
out=${4:-$here/results-hier.jsonl}
down() { ip netns del rkhb0 2>/dev/null || true; ip netns del rkhb1 2>/dev/null || true; }
trap down EXIT
down
ip netns add rkhb0
ip netns add rkhb1
ip link add rkhb-a netns rkhb0 type veth peer name rkhb-b netns rkhb1
ip -n rkhb0 addr add 10.79.0.1/24 dev rkhb-a
ip -n rkhb1 addr add 10.79.0.2/24 dev rkhb-b
for h in 0 1; do ip -n rkhb$h link set lo up; done
ip -n rkhb0 link set rkhb-a up
ip -n rkhb1 link set rkhb-b up
ifname=(rkhb-a rkhb-a rkhb-b rkhb-b)
secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
launch() {  # launch <label> <env...> -- <command...>: 4 ranks, two per namespace; rank 0's output tagged
  local label=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local port=$((30000 + RANDOM % 20000)) pids=() status=0
  for r in 3 2 1 0; do
    ip netns exec rkhb$((r / 2)) env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) MASTER_ADDR=10.79.0.1 \
      MASTER_PORT=$port RDMAKIT_JOB_SECRET="$secret" GLOO_SOCKET_IFNAME=${ifname[$r]} "${envs[@]}" \
      timeout 900 "$@" > "/tmp/rkhb-out$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  [ $status -eq 0 ] || { cat /tmp/rkhb-out*; return 1; }
  sed "s/^{/{\"label\":\"$label\",\"rep\":$rep,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" /tmp/rkhb-out0 |
    grep '^{' >>"$out"
}
: >"$out"
perf=("$build/tools/rdmakit-coll-perf" -b 4096 -e "$max" -f 4 -J)
for rep in $(seq 1 "$reps"); do
  echo "== repetition $rep (load $(cut -d' ' -f1-3 /proc/loadavg))"
  launch rdmakit-hier RDMAKIT_TRANSPORT=tcp RDMAKIT_COLL_HIERARCHICAL=on -- "${perf[@]}"
  launch rdmakit-flat RDMAKIT_TRANSPORT=tcp RDMAKIT_COLL_HIERARCHICAL=off -- "${perf[@]}"
  launch gloo OMP_NUM_THREADS=1 -- /usr/bin/python3 "$here/gloo_torch_allreduce.py" 4096 "$max" 4
done
python3 "$here/summarize-hier.py" "$out"
