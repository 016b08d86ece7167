#!/bin/bash
# Weights broadcast to N receivers through the pipelined chain, every receiver checking every byte.
#   broadcast.sh <bcast_node> loopback <transport> [receivers] [bytes]
#   broadcast.sh <bcast_node> netns [receivers] [bytes]
# netns: node i runs in its own network namespace, joined to node i+1 by a veth pair (10.77.i.0/24), so
# each hop crosses a real (virtual) link, over tcp; the namespaces are made and removed here. Without the
# right to create namespaces it skips (exit 77) saying so, unless CI is set (then it fails).
set -u
node=$1 mode=$2
if [ "$mode" = netns ]; then transport=tcp; receivers=${3:-3}; bytes=${4:-67108864}
else transport=${3:-tcp}; receivers=${4:-3}; bytes=${5:-67108864}; fi
dir=$(mktemp -d /tmp/rdmakit-bcast-XXXXXX)
session=s$$
prefix=rkx$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ "$mode" = netns ]; then for i in $(seq 0 "$receivers"); do ip netns del "$prefix$i" 2>/dev/null; done; fi
  rm -rf "$dir"
}
trap cleanup EXIT

run() {  # run <rank> <command...>: in the rank's namespace when there is one
  local rank=$1; shift
  if [ "$mode" = netns ]; then ip netns exec "$prefix$rank" "$@"; else "$@"; fi
}

if [ "$mode" = netns ]; then
  if ! ip netns add "${prefix}0" 2>/dev/null; then
    # CI (CI=true, root) must run it: a skip there would hide a broken set-up as a pass.
    if [ -n "${CI:-}" ]; then echo "FAIL: cannot create network namespaces, and CI is set"; exit 1; fi
    echo "SKIP: cannot create network namespaces here (needs root / CAP_SYS_ADMIN)"; exit 77
  fi
  for i in $(seq 1 "$receivers"); do ip netns add "$prefix$i" || exit 1; done
  for i in $(seq 0 "$receivers"); do ip -n "$prefix$i" link set lo up; done
  for i in $(seq 1 "$receivers"); do
    a=$((i - 1))
    ip link add "${prefix}a$i" netns "$prefix$a" type veth peer name "${prefix}b$i" netns "$prefix$i" || exit 1
    ip -n "$prefix$a" addr add "10.77.$i.1/24" dev "${prefix}a$i"
    ip -n "$prefix$i" addr add "10.77.$i.2/24" dev "${prefix}b$i"
    ip -n "$prefix$a" link set "${prefix}a$i" up
    ip -n "$prefix$i" link set "${prefix}b$i" up
  done
fi

# In netns mode the nodes listen beyond loopback: services that prove a secret need a job secret there.
RDMAKIT_JOB_SECRET=${RDMAKIT_JOB_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export RDMAKIT_JOB_SECRET
for r in $(seq "$receivers" -1 1); do
  listen=""
  [ "$mode" = netns ] && listen="10.77.$r.2:0"
  run "$r" "$node" "$dir" "$session" "$r" "$receivers" "$bytes" "$transport" $listen > "$dir/out$r" 2>&1 &
  pids+=($!)
done
run 0 "$node" "$dir" "$session" 0 "$receivers" "$bytes" "$transport" > "$dir/out0" 2>&1
status=$?
for p in "${pids[@]}"; do wait "$p" || status=1; done
pids=()
cat "$dir"/out*
if [ $status -ne 0 ]; then echo "FAIL: broadcast to $receivers receivers ($mode $transport)"; exit 1; fi
echo "PASS: broadcast of $bytes bytes to $receivers receivers ($mode $transport), every byte checked"
