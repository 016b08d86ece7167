#!/usr/bin/env bash
# Four "hosts" on one machine: network namespaces rdmakit-coll0..3 joined by veth pairs to a bridge,
# link-local addresses 169.254.77.1..4. Runs a command as 4 torchrun-style ranks, one per namespace
# (the store on rank 0 at 169.254.77.1). Needs root.
#   netns.sh up | down | run <binary> [args...] | run-gloo <gloo_allreduce> [args...]
set -euo pipefail
n=4
up() {
  ip link add rkc-br type bridge 2>/dev/null || true
  ip link set rkc-br up
  for i in $(seq 0 $((n - 1))); do
    ns=rdmakit-coll$i
    ip netns add $ns 2>/dev/null || true
    ip link add rkc-h$i type veth peer name rkc-n$i 2>/dev/null || true
    ip link set rkc-n$i netns $ns 2>/dev/null || true
    ip link set rkc-h$i master rkc-br
    ip link set rkc-h$i up
    ip netns exec $ns ip addr add 169.254.77.$((i + 1))/24 dev rkc-n$i 2>/dev/null || true
    ip netns exec $ns ip link set rkc-n$i up
    ip netns exec $ns ip link set lo up
  done
}
down() {
  for i in $(seq 0 $((n - 1))); do ip netns del rdmakit-coll$i 2>/dev/null || true; ip link del rkc-h$i 2>/dev/null || true; done
  ip link del rkc-br 2>/dev/null || true
}
# One rank per namespace. torchrun style (rdmakit): RANK, WORLD_SIZE, MASTER_ADDR/PORT. gloo style (the
# Gloo benchmark): Open MPI's rank variables, and the rank's own address as the last argument.
launch() {
  local style=$1
  shift
  port=$((30000 + RANDOM % 20000))
  # The ranks span "hosts" (namespaces): without a shared job secret the store would be unauthenticated.
  secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  pids=()
  for i in $(seq 0 $((n - 1))); do
    if [ "$style" = torchrun ]; then
      ip netns exec rdmakit-coll$i env RANK=$i WORLD_SIZE=$n LOCAL_RANK=0 MASTER_ADDR=169.254.77.1 \
        MASTER_PORT=$port RDMAKIT_JOB_SECRET=$secret timeout 600 "$@" &
    else
      ip netns exec rdmakit-coll$i env OMPI_COMM_WORLD_RANK=$i OMPI_COMM_WORLD_SIZE=$n \
        timeout 600 "$@" 169.254.77.$((i + 1)) &
    fi
    pids+=($!)
  done
  status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  return $status
}
run() { launch torchrun "$@"; }
run-gloo() { launch gloo "$@"; }
"$@"
