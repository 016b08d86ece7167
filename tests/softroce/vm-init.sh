#!/bin/sh
# vm-init.sh - PID 1 inside the Soft-RoCE test VM (installed as /init in the
# initramfs by run-in-vm.sh; runs under the host's dash, not busybox sh,
# because busybox's shell prefers its own applets over the real ip/rdma).
#
# Sets up rxe devices, runs /rdmakit/test.sh and prints
#   RDMAKIT-VM-EXIT=<status>
# which run-in-vm.sh turns into its own exit status, then powers off.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The initramfs root is itself a writable tmpfs; /tmp is NOT a separate mount
# so that files the harness placed under /tmp (--file /tmp/...) stay visible.
mkdir -p /tmp /run /dev/shm /dev/pts
chmod 1777 /tmp
mount -t tmpfs tmpfs /dev/shm
# The harness' boot watchdog waits for this line.
echo "RDMAKIT-VM-BOOTED uptime=$(cut -d' ' -f1 /proc/uptime)"

finish() {
    echo "RDMAKIT-VM-EXIT=$1"
    sync
    # poweroff -f needs ACPI; sysrq 'o' is the fallback; if both fail, PID 1
    # exiting panics the kernel and panic=-1 + qemu -no-reboot ends QEMU.
    poweroff -f 2>/dev/null
    echo o >/proc/sysrq-trigger 2>/dev/null
    sleep 5
    exit "$1"
}

# fail MESSAGE: a setup failure (not the test's); status 125 like the host side.
fail() {
    echo "rdmakit-vm: setup failed: $*" >&2
    finish 125
}

. /rdmakit/env

# Load the kernel modules in dependency order (computed by prepare.sh).
for m in $(cat /rdmakit/modules/order); do
    insmod "/rdmakit/modules/$m.ko" || fail "insmod $m"
done

ip link set lo up || fail "lo up"
# A veth end hands each packet to its peer's per-CPU backlog, which drops beyond netdev_max_backlog (1000);
# the emulated CPU drains it slowly on a loaded host. rxe (kernel 6.1) sees such a drop as a send error, and
# after one a transfer was seen to complete successfully with bytes missing (the xfer tests over two
# devices; likely what upstream's "RDMA/rxe: Fix incomplete state save in rxe_requester" fixed). A deep
# backlog keeps these drops, which no real wire makes, out of the tests; netem's losses look like the
# wire's to rxe (its sender sees no error), and its retries recover from them.
echo 100000 >/proc/sys/net/core/netdev_max_backlog || fail "netdev_max_backlog"

# gid_index_of DEV IPV4: index of the RoCEv2 GID built from IPV4 on DEV.
# perftest uses GID 0 (the MAC-derived IPv6 link-local GID) unless told with -x;
# the IPv4 GID is the one that follows our routing, so tests should use it.
gid_index_of() {
    want="0000:0000:0000:0000:0000:ffff:$(echo "$2" | awk -F. '{printf "%02x%02x:%02x%02x", $1, $2, $3, $4}')"
    i=0
    # The GID table is filled asynchronously after the address is added.
    tries=0
    while [ $tries -lt 100 ]; do
        for g in /sys/class/infiniband/"$1"/ports/1/gids/*; do
            if [ "$(cat "$g" 2>/dev/null)" = "$want" ]; then
                i=${g##*/}
                t=$(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/types/"$i" 2>/dev/null)
                case "$t" in *v2*) echo "$i"; return 0 ;; esac
            fi
        done
        tries=$((tries + 1))
        sleep 0.05
    done
    return 1
}

if [ "$RDMAKIT_VM_NDEVS" = 1 ]; then
    # One rxe device on a dummy netdev: rxe refuses 'lo' but loops packets for
    # its own address back itself, so client and server share rxe0.
    ip link add "$RDMAKIT_VM_NETDEV0" type dummy || fail "add dummy"
    ip link set "$RDMAKIT_VM_NETDEV0" up
    ip addr add "$RDMAKIT_VM_ADDR0/16" dev "$RDMAKIT_VM_NETDEV0" || fail "addr"
    rdma link add "$RDMAKIT_VM_DEV0" type rxe netdev "$RDMAKIT_VM_NETDEV0" || fail "rdma link add"
else
    # Two rxe devices on the two ends of a veth pair. Kernel 6.1's rxe only
    # works in the initial netns, so both ends stay here and policy routing
    # forces traffic between the two local addresses over the wire:
    #  - locally generated packets (iif lo) use table 100: peer address via the
    #    other veth end, before the 'local' table would short-cut them over lo;
    #  - packets arriving on a veth fall through to 'local' and are delivered;
    #    accept_local lets the kernel accept a packet whose source is local.
    ip link add "$RDMAKIT_VM_NETDEV0" type veth peer name "$RDMAKIT_VM_NETDEV1" || fail "add veth"
    for n in all default "$RDMAKIT_VM_NETDEV0" "$RDMAKIT_VM_NETDEV1"; do
        echo 1 >/proc/sys/net/ipv4/conf/$n/accept_local
        echo 0 >/proc/sys/net/ipv4/conf/$n/rp_filter
    done
    ip addr add "$RDMAKIT_VM_ADDR0/16" dev "$RDMAKIT_VM_NETDEV0" || fail "addr0"
    ip addr add "$RDMAKIT_VM_ADDR1/16" dev "$RDMAKIT_VM_NETDEV1" || fail "addr1"
    ip link set "$RDMAKIT_VM_NETDEV0" up
    ip link set "$RDMAKIT_VM_NETDEV1" up
    ip route add "$RDMAKIT_VM_ADDR1/32" dev "$RDMAKIT_VM_NETDEV0" src "$RDMAKIT_VM_ADDR0" table 100 || fail "route0"
    ip route add "$RDMAKIT_VM_ADDR0/32" dev "$RDMAKIT_VM_NETDEV1" src "$RDMAKIT_VM_ADDR1" table 100 || fail "route1"
    ip rule add pref 100 iif lo lookup 100 || fail "rule 100"
    ip rule add pref 200 lookup local || fail "rule local"
    ip rule del pref 0 lookup local || fail "moving the local rule"
    # Static neighbours: the first rdma_resolve_addr in a fresh VM otherwise waits on ARP across the
    # policy-routed pair and was seen to miss its deadline.
    mac0=$(cat "/sys/class/net/$RDMAKIT_VM_NETDEV0/address")
    mac1=$(cat "/sys/class/net/$RDMAKIT_VM_NETDEV1/address")
    ip neigh replace "$RDMAKIT_VM_ADDR1" lladdr "$mac1" dev "$RDMAKIT_VM_NETDEV0" nud permanent || fail "neigh0"
    ip neigh replace "$RDMAKIT_VM_ADDR0" lladdr "$mac0" dev "$RDMAKIT_VM_NETDEV1" nud permanent || fail "neigh1"
    rdma link add "$RDMAKIT_VM_DEV0" type rxe netdev "$RDMAKIT_VM_NETDEV0" || fail "rdma link add 0"
    rdma link add "$RDMAKIT_VM_DEV1" type rxe netdev "$RDMAKIT_VM_NETDEV1" || fail "rdma link add 1"
    RDMAKIT_VM_GIDIDX1=$(gid_index_of "$RDMAKIT_VM_DEV1" "$RDMAKIT_VM_ADDR1") ||
        fail "no RoCEv2 GID for $RDMAKIT_VM_ADDR1 on $RDMAKIT_VM_DEV1"
    export RDMAKIT_VM_GIDIDX1
fi
RDMAKIT_VM_GIDIDX0=$(gid_index_of "$RDMAKIT_VM_DEV0" "$RDMAKIT_VM_ADDR0") ||
    fail "no RoCEv2 GID for $RDMAKIT_VM_ADDR0 on $RDMAKIT_VM_DEV0"
export RDMAKIT_VM_GIDIDX0

echo "RDMAKIT-VM-READY uptime=$(cut -d' ' -f1 /proc/uptime)"

cd "${RDMAKIT_VM_WORKDIR:-/}" || fail "cd $RDMAKIT_VM_WORKDIR"
. /rdmakit/args
/bin/sh /rdmakit/test.sh "$@" </dev/null
rc=$?
echo "RDMAKIT-VM-DONE uptime=$(cut -d' ' -f1 /proc/uptime)"
finish "$rc"
