#!/bin/sh
# smoke-guest.sh - runs INSIDE the Soft-RoCE VM (see smoke.sh). POSIX sh (dash).
# Exercises verbs (perftest) and the rdma_cm path (rping, ucmatose) between a
# client on RDMAKIT_VM_DEV0 and a server on the last device; with two devices
# it also proves the RoCE traffic crossed the veth pair.
set -u

fails=0
pass() { echo "SMOKE PASS: $*"; }
failed() { echo "SMOKE FAIL: $*"; fails=$((fails + 1)); }

if [ "$RDMAKIT_VM_NDEVS" = 2 ]; then
    sdev=$RDMAKIT_VM_DEV1 saddr=$RDMAKIT_VM_ADDR1 sgid=$RDMAKIT_VM_GIDIDX1
else
    sdev=$RDMAKIT_VM_DEV0 saddr=$RDMAKIT_VM_ADDR0 sgid=$RDMAKIT_VM_GIDIDX0
fi
cdev=$RDMAKIT_VM_DEV0 cgid=$RDMAKIT_VM_GIDIDX0
echo "smoke: $RDMAKIT_VM_NDEVS device(s); server $sdev $saddr gid $sgid, client $cdev gid $cgid"

echo "--- ibv_devinfo"
if ibv_devinfo -d "$cdev" >/tmp/devinfo 2>&1 && grep -q PORT_ACTIVE /tmp/devinfo; then
    pass "ibv_devinfo: $cdev port active"
else
    cat /tmp/devinfo; failed "ibv_devinfo"
fi
echo "--- rdma link"
rdma link
[ "$(rdma link | grep -c 'state ACTIVE')" = "$RDMAKIT_VM_NDEVS" ] && pass "rdma link: $RDMAKIT_VM_NDEVS active" || failed "rdma link"

# counters NETDEV: "tx_packets rx_packets" of a netdev.
counters() {
    echo "$(cat /sys/class/net/"$1"/statistics/tx_packets) $(cat /sys/class/net/"$1"/statistics/rx_packets)"
}

# client_server NAME SERVER-CMD -- CLIENT-CMD: start the server in the
# background, retry the client until the server listens, check both statuses.
# Emulation makes everything slow, hence the generous timeouts.
client_server() {
    name=$1; shift
    scmd=""
    while [ "$1" != -- ]; do scmd="$scmd $1"; shift; done
    shift
    timeout 180 $scmd >/tmp/$name.server 2>&1 &
    spid=$!
    tries=0 crc=1
    while [ $tries -lt 20 ]; do
        sleep 0.5
        timeout 180 "$@" >/tmp/$name.client 2>&1 && { crc=0; break; }
        crc=$?
        # Only retry if the server was not listening yet.
        grep -qiE "couldn't connect|connection refused|unable to|rdma_connect|REJECTED|failed.*conn" /tmp/$name.client || break
        kill -0 $spid 2>/dev/null || break
        tries=$((tries + 1))
    done
    wait $spid
    src=$?
    if [ $crc = 0 ] && [ $src = 0 ]; then
        pass "$name"
        return 0
    fi
    echo "----- $name server (status $src):"; cat /tmp/$name.server
    echo "----- $name client (status $crc):"; cat /tmp/$name.client
    failed "$name"
    return 1
}

if [ "$RDMAKIT_VM_NDEVS" = 2 ]; then
    before0=$(counters "$RDMAKIT_VM_NETDEV0") before1=$(counters "$RDMAKIT_VM_NETDEV1")
fi

echo "--- ib_write_bw"
t0=$(cut -d' ' -f1 /proc/uptime)
if client_server ib_write_bw ib_write_bw -d "$sdev" -x "$sgid" -F -n 200 -s 65536 -- \
        ib_write_bw -d "$cdev" -x "$cgid" -F -n 200 -s 65536 "$saddr"; then
    # Result line: bytes iterations BW-peak BW-average MsgRate (MB/s).
    bw=$(awk '$1 == 65536 && $2 == 200 {print $4}' /tmp/ib_write_bw.client)
    echo "SMOKE RESULT: ib_write_bw 64KiB x200: average ${bw:-?} MB/s"
    [ -n "$bw" ] || failed "ib_write_bw: no result line"
fi
echo "(took $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{print b - a}') s)"

echo "--- ib_read_lat"
if client_server ib_read_lat ib_read_lat -d "$sdev" -x "$sgid" -F -n 500 -- \
        ib_read_lat -d "$cdev" -x "$cgid" -F -n 500 "$saddr"; then
    # Result line: bytes iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%.
    lat=$(awk '$1 == 2 && $2 == 500 {print "min " $3 " typical " $5 " avg " $6}' /tmp/ib_read_lat.client)
    echo "SMOKE RESULT: ib_read_lat 2B x500 (usec): ${lat:-?}"
    [ -n "$lat" ] || failed "ib_read_lat: no result line"
fi

echo "--- rping (rdma_cm)"
if client_server rping rping -s -a "$saddr" -C 10 -- rping -c -a "$saddr" -C 10 -v; then
    [ "$(grep -c 'ping data' /tmp/rping.client)" -ge 10 ] || failed "rping: fewer than 10 pings"
fi

echo "--- ucmatose (rdma_cm)"
client_server ucmatose ucmatose -b "$saddr" -c 1 -C 10 -- ucmatose -s "$saddr" -c 1 -C 10

if [ "$RDMAKIT_VM_NDEVS" = 2 ]; then
    after0=$(counters "$RDMAKIT_VM_NETDEV0") after1=$(counters "$RDMAKIT_VM_NETDEV1")
    tx0=$(( ${after0% *} - ${before0% *} )) rx1=$(( ${after1#* } - ${before1#* } ))
    tx1=$(( ${after1% *} - ${before1% *} )) rx0=$(( ${after0#* } - ${before0#* } ))
    echo "SMOKE RESULT: veth packets: $RDMAKIT_VM_NETDEV0 tx $tx0 rx $rx0, $RDMAKIT_VM_NETDEV1 tx $tx1 rx $rx1"
    # 200 x 64 KiB at RoCE MTU 1024 alone is 12800 packets v0 -> v1.
    if [ "$tx0" -ge 12800 ] && [ "$rx1" -ge 12800 ] && [ "$tx1" -gt 0 ]; then
        pass "RoCE traffic crossed the veth pair"
    else
        failed "too few packets on the veth pair: traffic did not cross it"
    fi
fi

echo "smoke: $fails failure(s)"
[ "$fails" = 0 ]
