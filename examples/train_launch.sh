#!/usr/bin/env bash
# Launches the data-parallel training example the way clusters do and checks that its loss matches the
# single-process run (train_logreg prints MATCH/MISMATCH on rank 0 and exits non-zero on a mismatch).
#   train_launch.sh <train_logreg> <ranks> torchrun   # sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT
#   train_launch.sh <train_logreg> <ranks> mpirun     # Open MPI's mpirun (skips with 77 when not installed;
#                                                     # fails instead where CI is set: .ci/run installs it)
set -u
binary=$1 ranks=$2 launcher=$3
skip() {
  if [ -n "${CI:-}" ]; then echo "FAILED: $* (CI is set: a missing prerequisite fails there, never skips)"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
output=$(mktemp)
# The job secret every rank proves to the store and to each other (a launcher passes it like MASTER_PORT).
RDMAKIT_JOB_SECRET=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
export RDMAKIT_JOB_SECRET
trap 'rm -f "$output"' EXIT
case "$launcher" in
  torchrun)
    # A port the kernel says is free now (a random one collided with another test's listener once).
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
           2>/dev/null || echo $(( 30000 + (RANDOM % 20000) )))
    pids=()
    for ((r = 0; r < ranks; r++)); do
      RANK=$r WORLD_SIZE=$ranks LOCAL_RANK=$r LOCAL_WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout 120 "$binary" >>"$output" 2>&1 &
      pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    ;;
  mpirun)
    command -v mpirun >/dev/null || skip "mpirun not installed (apt-get install openmpi-bin)"
    extra=()
    [ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
    timeout 120 mpirun "${extra[@]}" --oversubscribe -x RDMAKIT_JOB_SECRET -np "$ranks" "$binary" >"$output" 2>&1
    status=$?
    ;;
  *) echo "unknown launcher $launcher"; exit 2 ;;
esac
cat "$output"
grep -q "MATCH" "$output" && ! grep -q "MISMATCH" "$output" && [ "$status" = 0 ] || { echo "FAILED ($launcher, $ranks ranks)"; exit 1; }
echo "ok: $launcher with $ranks ranks matches the single-process loss"
