#!/bin/bash
# Hierarchical allreduce across network namespaces: two "hosts" (namespaces joined by a veth pair,
# 10.78.<id>.1 and .2) of two ranks each, launched torchrun-style; each rank runs hier_node, which checks
# every result exactly. The namespaces are made and removed here. Without the right to create them it
# skips (exit 77) saying so.
#   hier_netns.sh <hier_node>
set -u
node=$(realpath "$1")
prefix=rkh$$
id=$(($$ % 250 + 1))
dir=$(mktemp -d /tmp/rdmakit-hier-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "${prefix}0" 2>/dev/null
  ip netns del "${prefix}1" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

if ! ip netns add "${prefix}0" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root / CAP_SYS_ADMIN)"; exit 77
fi
ip netns add "${prefix}1" || exit 1
ip link add "${prefix}a" netns "${prefix}0" type veth peer name "${prefix}b" netns "${prefix}1" || exit 1
for h in 0 1; do
  ip -n "$prefix$h" link set lo up || exit 1
done
ip -n "${prefix}0" addr add "10.78.$id.1/24" dev "${prefix}a" || exit 1
ip -n "${prefix}1" addr add "10.78.$id.2/24" dev "${prefix}b" || exit 1
ip -n "${prefix}0" link set "${prefix}a" up || exit 1
ip -n "${prefix}1" link set "${prefix}b" up || exit 1

port=$((20000 + RANDOM % 20000))
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
for rank in 3 2 1 0; do
  host=$((rank / 2))
  ip netns exec "$prefix$host" env RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$((rank % 2)) \
    MASTER_ADDR="10.78.$id.1" MASTER_PORT=$port RDMAKIT_JOB_SECRET="$secret" \
    RDMAKIT_LISTEN_ADDRESS="10.78.$id.$((host + 1)):0" RDMAKIT_TEST_WATCHDOG_S=120 \
    "$node" > "$dir/out$rank" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
pids=()
for rank in 0 1 2 3; do echo "--- rank $rank"; cat "$dir/out$rank"; done
if [ $status -ne 0 ]; then echo "FAIL: hierarchical allreduce across two namespaces of two ranks"; exit 1; fi
if grep -q "SKIPPED" "$dir/out0"; then echo "FAIL: the ranks skipped instead of running"; exit 1; fi
echo "PASS: hierarchical allreduce across two namespaces of two ranks, every result checked"
