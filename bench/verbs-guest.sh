#!/bin/sh
# Runs inside the Soft-RoCE VM (see compare-verbs.sh): rdmakit-perf vs perftest on the same rxe device,
# alternating per size and test, REPS times, on each thread placement of PLACEMENTS ("unpinned": wherever
# the guest's scheduler puts them; "split": server on CPU 0, client on CPU 1). Prints "RESULT <rep> <system>
# <test> <size> <value> <placement>" lines: bandwidth in bytes/s, latency in microseconds (median:
# perftest's t_typical). TESTS narrows the tests (default all seven).
PERF=${PERF:?path of rdmakit-perf}
REPS=${REPS:-3}
SIZES=${SIZES:-"8 4096 65536 1048576"}
TESTS=${TESTS:-"write_bw read_bw send_bw write_lat read_lat send_lat atomic_lat"}
PLACEMENTS=${PLACEMENTS:-unpinned}
DEV=$RDMAKIT_VM_DEV0
ADDR=$RDMAKIT_VM_ADDR0
GID=$RDMAKIT_VM_GIDIDX0
# The server listens on the device's address, beyond loopback: both sides prove a job secret (without one
# rdmakit-perf refuses to run there).
RDMAKIT_JOB_SECRET=${RDMAKIT_JOB_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export RDMAKIT_JOB_SECRET
port=19000
echo "MACHINE nproc=$(nproc) kernel=$(uname -r) load=$(cat /proc/loadavg)"

iters() {  # latency: 1000 rounds; bandwidth: fewer for big messages (QEMU/TCG is slow)
  case $1 in *lat) echo 1000 ;; *) if [ "$2" -ge 1048576 ]; then echo 200; else echo 2000; fi ;; esac
}

# perftest's defaults for the bandwidth window: -t 128, one signaled op in 100 (--cq-mod), one work request
# per ibv_post_send (-l 1; rdmakit-perf's default chain is cq-mod long, and long chains are slow on rxe).
rdmakit() {  # test size
  port=$((port + 1)); n=$(iters "$1" "$2")
  $server_pin "$PERF" "$1" --transport verbs -d "$DEV" --listen "$ADDR" -p $port >/dev/null 2>&1 &
  sleep 1
  out=$($client_pin "$PERF" "$1" "$ADDR" --transport verbs -d "$DEV" -p $port -s "$2" -n "$n" -t 128 --cq-mod 100 \
    --post-list 1 --json 2>&1)
  wait
  case $1 in
    *_bw) echo "$out" | grep -o '"bw_avg_bytes_per_s": [0-9.]*' | awk '{ print $2 }' ;;
    *) echo "$out" | grep -o '"lat_median_us": [0-9.]*' | awk '{ print $2 }' ;;
  esac
}

perftest() {  # test size
  port=$((port + 1)); n=$(iters "$1" "$2")
  tool=ib_$1
  $server_pin "$tool" -d "$DEV" -x "$GID" -p $port -s "$2" -n "$n" -F >/dev/null 2>&1 &
  sleep 1
  out=$($client_pin "$tool" -d "$DEV" -x "$GID" -p $port -s "$2" -n "$n" -F "$ADDR" 2>&1)
  wait
  # Result rows start with the size; bandwidth: MsgRate[Mpps] is column 5; latency: t_typical column 5.
  row=$(echo "$out" | awk -v s="$2" '$1 == s { print; exit }')
  case $1 in
    *_bw) echo "$row" | awk -v s="$2" '{ printf "%.0f\n", $5 * 1000000 * s }' ;;
    *) echo "$row" | awk '{ print $5 }' ;;
  esac
}

for placement in $PLACEMENTS; do
  case $placement in
    split) server_pin="taskset -c 0" client_pin="taskset -c 1" ;;
    *) server_pin="" client_pin="" ;;
  esac
  rep=0
  while [ $rep -lt "$REPS" ]; do
    for size in $SIZES; do
      for test in $TESTS; do
        [ "$test" = atomic_lat ] && [ "$size" != 8 ] && continue
        echo "RESULT $rep rdmakit $test $size $(rdmakit $test $size) $placement"
        echo "RESULT $rep perftest $test $size $(perftest $test $size) $placement"
      done
    done
    rep=$((rep + 1))
  done
done
