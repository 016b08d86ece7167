#!/bin/sh
# Runs inside the Soft-RoCE VM (see compare-verbs.sh): the transfer engine's batch throughput against raw
# `rdmakit-perf write_bw` on the same rxe device, alternating per configuration, REPS times; then the
# broadcast chain to 1, 2 and 3 receivers. Prints
#   "RESULT <rep> <system> <block> <batch> <GB/s>" and the broadcast table of rdmakit-xfer-bench.
# Under TCG only the ratios mean anything.
PERF=${PERF:?path of rdmakit-perf}
XBENCH=${XBENCH:?path of rdmakit-xfer-bench}
REPS=${REPS:-5}
SECS=${SECS:-3}
DEV=$RDMAKIT_VM_DEV0
ADDR=$RDMAKIT_VM_ADDR0
port=19500
echo "MACHINE nproc=$(nproc) kernel=$(uname -r) load=$(cat /proc/loadavg)"

raw() {  # block -> GB/s (rdmakit-perf's defaults: 128 in flight, poll mode)
  port=$((port + 1))
  "$PERF" write_bw --transport verbs -d "$DEV" --listen "$ADDR" -p $port >/dev/null 2>&1 &
  sleep 1
  "$PERF" write_bw "$ADDR" --transport verbs -d "$DEV" -p $port -s "$1" -D "$SECS" --csv 2>/dev/null |
    awk -F, 'NR==2 {print $8/1000}'
  wait
}
engine() {  # block batch -> GB/s (every request of a batch on one block-sized slot, as rdmakit-perf)
  "$XBENCH" --transport verbs --devices "$DEV" --owner-devices "$DEV" --block "$1" --batch "$2" \
    --segment "$1" --duration "$SECS" --peer-timeout-ms 15000 2>/dev/null |
    awk -F'|' '$2 ~ /verbs/ && $8+0 > 0 {print $8+0}'
}

rep=0
while [ $rep -lt "$REPS" ]; do
  for config in "65536 16" "1048576 4" "16384 256"; do
    set -- $config
    echo "RESULT $rep rdmakit-perf $1 $2 $(raw "$1")"
    echo "RESULT $rep engine $1 $2 $(engine "$1" "$2")"
  done
  rep=$((rep + 1))
done
echo "===== broadcast over verbs, one device"
RDMAKIT_DEVICE=$DEV "$XBENCH" --broadcast 1,2,3 --transport verbs --bcast-size "${BCAST_SIZE:-32M}"
echo "MACHINE load at end=$(cat /proc/loadavg)"
