#!/usr/bin/env bash
# Brings up a single-node Slurm cluster of its own (munged, slurmctld, slurmd: config, key, state and ports
# in a temporary directory, nothing under /etc or /var touched), launches the training example with
# `srun -n <ranks>` and checks its loss against the single-process run, as train_launch.sh does for
# torchrun and mpirun. Everything it started is stopped on exit, whatever happened.
#   slurm_train.sh <train_logreg> <ranks>
# Exit 77 (a skip, with the reason printed) when Slurm or munge is not installed or cannot run here; where
# the environment variable CI is set (.ci/run: root, every package installed) that is a failure instead, so
# that a broken install cannot pass as a skip.
set -u
binary=$1 ranks=$2
skip() {
  if [ -n "${CI:-}" ]; then echo "FAILED: $* (CI is set: a missing prerequisite fails there, never skips)"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
for tool in munged mungekey slurmctld slurmd srun scontrol; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin command -v "$tool" >/dev/null ||
    skip "$tool not installed (apt-get install slurm-wlm munge)"
done
export PATH=$PATH:/usr/sbin
# slurmd runs jobs as their user and switches to it: only root can run the daemons as they are meant to.
[ "$(id -u)" = 0 ] || skip "a Slurm node needs slurmd to run as root (this is uid $(id -u))"

dir=$(mktemp -d /tmp/rdmakit-slurm.XXXXXX)
chmod 700 "$dir"
pids=()
cleanup() {
  [ -n "${SLURM_CONF:-}" ] && timeout 5 scancel --quiet --full --signal=KILL --user=root 2>/dev/null
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
  echo "FAILED (srun, $ranks ranks): $*"
  for log in "$dir"/*.log; do [ -s "$log" ] && { echo "--- $log"; tail -n 30 "$log"; }; done
  exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: a fresh key and a daemon on a socket of our own (--force: munged refuses root otherwise).
mungekey --create --keyfile="$dir/munge.key" 2>/dev/null ||
  { dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none && chmod 600 "$dir/munge.key"; }
munged --foreground --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" >>"$dir/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$dir/munge.socket" ] && break; sleep 0.1; done
[ -S "$dir/munge.socket" ] || fail "munged did not start"

# One node called localhost, so the ranks' store (on the job's first node) is on loopback. It declares
# more CPUs than a small CI machine has: config_overrides keeps slurmd from draining it for that.
node=localhost
cpus=$(( ranks > 4 ? ranks : 4 ))
cat >"$dir/slurm.conf" <<EOF
ClusterName=rdmakit
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=rdmakit Nodes=$node Default=YES MaxTime=10 State=UP OverSubscribe=YES
EOF
mkdir -p "$dir/state" "$dir/spool"
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -f "$SLURM_CONF" >>"$dir/slurmctld.log" 2>&1 &
pids+=($!)
slurmd -D -N "$node" -f "$SLURM_CONF" >>"$dir/slurmd.log" 2>&1 &
pids+=($!)

# Up when the node is idle (slurmd registered with slurmctld), within a minute.
state=
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
  state=$(timeout 5 sinfo --noheader --node="$node" --format=%T 2>/dev/null)
  [ "$state" = idle ] && break
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || fail "a daemon exited during start-up"; done
  sleep 0.2
done
[ "$state" = idle ] || fail "the node did not become idle (state '$state')"

RDMAKIT_JOB_SECRET=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
export RDMAKIT_JOB_SECRET
output=$dir/srun.out
timeout 120 srun --ntasks="$ranks" --nodes=1 --time=5 --kill-on-bad-exit=1 --export=ALL "$binary" >"$output" 2>&1
status=$?
cat "$output"
[ "$status" = 0 ] || fail "srun exited with $status"
grep -q "MATCH" "$output" && ! grep -q "MISMATCH" "$output" || fail "no MATCH in the output"
echo "ok: srun with $ranks ranks matches the single-process loss"
