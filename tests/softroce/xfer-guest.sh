#!/bin/sh
# xfer-guest.sh - the transfer engine over verbs, inside the Soft-RoCE VM (run by verbs-conformance.sh's
# guest script; dash, no bash features). On one device (rxe0, client and owner share it) or striped over
# two (the client's rails rxe0,rxe1 pair with the owner's rxe1,rxe0: every connection crosses the veth
# pair, one rail in each direction):
#   * xfer_engine_test's verbs cases (batches, striping, coalescing, bounds, a restarted owner, a killed one);
#   * xfer_file_test's verbs cases (file segments: READs and WRITEs of published files, bad ranges, a killed
#     owner);
#   * the KV-cache example (prefill -> decode, both layouts, every block checked);
#   * rdmakit-xfer-bench, a short WRITE run (its summary line carries the bytes/s; emulated, see README.md).
# Usage: xfer-guest.sh BUILD_DIR REPO_DIR. Prints "XFER PASS/FAIL: ..." per part; exit status = failures.
b=$1 repo=$2
fails=0
check() { if [ "$1" = 0 ]; then echo "XFER PASS: $2"; else echo "XFER FAIL: $2 (exit $1)"; fails=$((fails + 1)); fi; }
packets() { cat "/sys/class/net/$1/statistics/tx_packets"; }

if [ "$RDMAKIT_VM_NDEVS" = 2 ]; then
    client=$RDMAKIT_VM_DEV0,$RDMAKIT_VM_DEV1 owner=$RDMAKIT_VM_DEV1,$RDMAKIT_VM_DEV0
    tx0=$(packets "$RDMAKIT_VM_NETDEV0") tx1=$(packets "$RDMAKIT_VM_NETDEV1")
else
    client=$RDMAKIT_VM_DEV0 owner=$RDMAKIT_VM_DEV0
fi
what="$RDMAKIT_VM_NDEVS device(s): client $client, owner $owner"

echo "===== xfer: xfer_engine_test over verbs ($what)"
(cd "$b/tests/xfer" && RDMAKIT_TEST_XFER_VERBS_DEVICES=$client timeout 300 ./xfer_engine_test --gtest_filter='*verbs*')
check $? "xfer_engine_test over verbs ($what)"

echo "===== xfer: xfer_file_test over verbs ($what)"
# File segments (issue #28): the file test set's verbs cases (every byte checked, READ and WRITE where
# allowed, bad ranges, a killed owner). The guest's /tmp is tmpfs: the owner falls back from O_DIRECT.
(cd "$b/tests/xfer" && RDMAKIT_TEST_XFER_VERBS_DEVICES=$client timeout 300 ./xfer_file_test --gtest_filter='*verbs*')
check $? "xfer_file_test over verbs ($what)"

out=$(mktemp)
for layout in block layer; do
    echo "===== xfer: KV-cache example over verbs, $layout layout ($what)"
    DECODE_DEVICES=$owner PREFILL_DEVICES=$client timeout 180 bash "$repo/examples/xfer_kvcache.sh" \
        "$b/examples/xfer_kvcache" verbs "$layout" 8 > "$out" 2>&1
    status=$?
    cat "$out"
    check $status "KV-cache example over verbs, $layout layout ($what)"
    if [ "$RDMAKIT_VM_NDEVS" = 2 ]; then
        # Striped: prefill's two rails (lines "prefill: rail I (verbs DEV): N work requests") each posted some.
        busy=$(grep -c '^prefill: rail [01] (verbs [^)]*): [1-9][0-9]* work requests$' "$out")
        [ "$busy" = 2 ]
        check $? "KV-cache example, $layout layout: both rails posted work requests ($busy of 2 rails > 0)"
    fi
done
rm -f "$out"

echo "===== xfer: rdmakit-xfer-bench over verbs ($what)"
timeout 120 "$b/tools/rdmakit-xfer-bench" --transport verbs --devices "$client" --owner-devices "$owner" \
    --op write --block 64K --batch 16 --segment 16M --duration 3 --peer-timeout-ms 15000
check $? "rdmakit-xfer-bench over verbs ($what), bytes verified"

if [ "$RDMAKIT_VM_NDEVS" = 2 ]; then
    # Striped: both rails carried a share (WRITE payloads leave the client's device on each).
    d0=$(($(packets "$RDMAKIT_VM_NETDEV0") - tx0)) d1=$(($(packets "$RDMAKIT_VM_NETDEV1") - tx1))
    echo "xfer: veth $RDMAKIT_VM_NETDEV0 sent $d0 packets, $RDMAKIT_VM_NETDEV1 sent $d1"
    [ "$d0" -gt 10000 ] && [ "$d1" -gt 10000 ]
    check $? "xfer striped over both devices (each veth end sent > 10000 packets)"
    # Drops on the pair (the receiving end's backlog under emulation): rxe's retries recovered them.
    for n in "$RDMAKIT_VM_NETDEV0" "$RDMAKIT_VM_NETDEV1"; do
        echo "xfer: $n dropped rx $(cat /sys/class/net/$n/statistics/rx_dropped) tx $(cat /sys/class/net/$n/statistics/tx_dropped)"
    done
fi
echo "xfer: $fails failure(s)"
exit $fails
