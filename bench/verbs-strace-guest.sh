#!/bin/sh
# In the Soft-RoCE VM (tests/softroce/run-in-vm.sh --file strace --file ib_read_lat --file ib_send_lat ...): system
# calls of rdmakit-perf and perftest, client and server, at two iteration counts (NS), as "SYS <tool> <test> <n>
# <side> <syscall> <count>" lines (the per-operation count is the difference over the difference of n), then
# the threads of each side with their voluntary / non-voluntary context switches during a long run.
PERF=${PERF:?}
DEV=$RDMAKIT_VM_DEV0; ADDR=$RDMAKIT_VM_ADDR0; GID=$RDMAKIT_VM_GIDIDX0
# The server listens on the device's address, beyond loopback: both sides prove a job secret (without one
# rdmakit-perf refuses to run there).
RDMAKIT_JOB_SECRET=${RDMAKIT_JOB_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export RDMAKIT_JOB_SECRET
TESTS=${TESTS:-"read_lat send_lat"}
NS=${NS:-"200 1200"}
port=19500
cmds() {  # system test n -> sets server, client
  if [ "$1" = rdmakit ]; then
    server="$PERF $2 --transport verbs -d $DEV --listen $ADDR -p $port"
    client="$PERF $2 $ADDR --transport verbs -d $DEV -p $port -s 8 -n $3 -t 128 --cq-mod 100 --post-list 1"
  else
    server="ib_$2 -d $DEV -x $GID -p $port -s 8 -n $3 -F"
    client="ib_$2 -d $DEV -x $GID -p $port -s 8 -n $3 -F $ADDR"
  fi
}
summ() {  # label file
  awk -v l="$1" '$2 ~ /^<\.\.\./ { next } { n = $2; sub(/\(.*/, "", n); c[n]++; t[$1]++ }
    END { for (k in c) print "SYS", l, k, c[k]; for (k in t) print "TID", l, k, t[k] }' "$2"
}
for test in $TESTS; do
  for n in $NS; do
    for sys in rdmakit perftest; do
      port=$((port + 1)); cmds $sys $test $n
      strace -f -qq -o /tmp/st.server $server >/dev/null 2>&1 &
      sleep 2
      strace -f -qq -o /tmp/st.client $client >/tmp/out 2>&1 || { echo "FAIL $sys $test"; tail -5 /tmp/out; }
      wait
      summ "$sys $test $n server" /tmp/st.server
      summ "$sys $test $n client" /tmp/st.client
      if [ "$n" = "${NS%% *}" ]; then echo "=== $sys $test client trace (tail)"; grep -v -e '^ *$' /tmp/st.client | tail -60; fi
    done
  done
done
# Threads and context switches during a long run (no strace).
threads() {  # label pid
  for t in /proc/$2/task/*; do
    echo "THR $1 $(basename $t) $(cat $t/comm) $(grep -E '^(voluntary|nonvoluntary)_ctxt' $t/status | awk '{printf "%s ", $2}')"
  done
}
for test in $TESTS; do
  for sys in rdmakit perftest; do
    port=$((port + 1)); cmds $sys $test 60000
    $server >/dev/null 2>&1 & spid=$!
    sleep 2
    $client >/tmp/out 2>&1 & cpid=$!
    sleep 1.5
    threads "$sys $test server t0" $spid; threads "$sys $test client t0" $cpid
    sleep 1
    threads "$sys $test server t1" $spid; threads "$sys $test client t1" $cpid
    wait
    grep -E '"lat_median_us"|^ *8 ' /tmp/out | head -3
  done
done
