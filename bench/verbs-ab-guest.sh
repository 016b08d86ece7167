#!/bin/sh
# In the Soft-RoCE VM: perftest vs rdmakit-perf variants, 8 B latency, REPS interleaved repetitions, as
# "AB <rep> <variant> <us> <test>" lines. VARIANTS: "name:ENV=v,..." or "name@/path/rdmakit-perf:ENV=v,-w,1000"
# (comma-separated environment and extra arguments; LD_LIBRARY_PATH=<dir> runs an older librdmakit copy).
#   tests/softroce/run-in-vm.sh --file build/tools/rdmakit-perf --file bench/verbs-ab-guest.sh --file ib_read_lat \
#     --env PERF=$PWD/build/tools/rdmakit-perf --env N=5000 --env "VARIANTS=new:X=1" -- bench/verbs-ab-guest.sh
PERF=${PERF:?}; DEV=$RDMAKIT_VM_DEV0; ADDR=$RDMAKIT_VM_ADDR0; GID=$RDMAKIT_VM_GIDIDX0
# The server listens on the device's address, beyond loopback: both sides prove a job secret (without one
# rdmakit-perf refuses to run there).
RDMAKIT_JOB_SECRET=${RDMAKIT_JOB_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export RDMAKIT_JOB_SECRET
REPS=${REPS:-4}; N=${N:-1000}; TESTS=${TESTS:-read_lat}
port=19700
echo "MACHINE nproc=$(nproc) load=$(cat /proc/loadavg)"
run_rdmakit() {  # perf-binary env-and-args (comma-separated; items starting with - or a digit are args)
  port=$((port + 1)); envs=""; args=""
  for kv in $(echo "$2" | tr , " "); do case $kv in -* | [0-9]*) args="$args $kv" ;; *) envs="$envs $kv" ;; esac; done
  env $envs "$1" $TEST --transport verbs -d "$DEV" --listen "$ADDR" -p $port >/dev/null 2>&1 &
  sleep 1
  out=$(env $envs "$1" $TEST "$ADDR" --transport verbs -d "$DEV" -p $port -s 8 -n $N $args -t 128 --cq-mod 100 --post-list 1 --json 2>&1)
  wait
  echo "$out" | grep -o '"lat_median_us": [0-9.]*' | awk '{ print $2 }'
}
run_perftest() {
  port=$((port + 1))
  ib_$TEST -d "$DEV" -x "$GID" -p $port -s 8 -n $N -F >/dev/null 2>&1 &
  sleep 1
  ib_$TEST -d "$DEV" -x "$GID" -p $port -s 8 -n $N -F "$ADDR" 2>&1 | awk '$1 == 8 { print $5; exit }'
  wait
}
rep=0
while [ $rep -lt "$REPS" ]; do
 for TEST in $TESTS; do
  echo "AB $rep perftest $(run_perftest) $TEST"
  for v in $VARIANTS; do
    name=${v%%:*}; rest=${v#*:}; bin=$PERF
    case $name in *@*) bin=${name#*@}; name=${name%@*} ;; esac
    echo "AB $rep $name $(run_rdmakit "$bin" "$rest") $TEST"
  done
 done
  rep=$((rep + 1))
done
