#!/usr/bin/env bash
# run-in-vm.sh - run a shell script inside a QEMU (TCG) Linux VM that has
# Soft-RoCE (rdma_rxe) devices, and exit with the script's exit status.
#
# The host kernel has no RDMA support, so tests needing real verbs run here:
# the Debian kernel fetched by prepare.sh boots from an initramfs built on the
# fly; there is no disk and no network device to the host (-nodefaults).
#
# Usage:
#   run-in-vm.sh [OPTIONS] -- SCRIPT [ARGS...]
#   run-in-vm.sh [OPTIONS] -c 'SHELL COMMANDS'
#
# Options:
#   --two-devices        two rxe devices (rxe0 on veth v0, rxe1 on veth v1) whose
#                        traffic really crosses the veth pair; default is one
#                        device rxe0 on a dummy netdev (loops back in the driver)
#   --file HOST[:VM]     copy HOST (file or directory, recursively) into the VM
#                        at VM (default: the same absolute path as on the host,
#                        so build trees with absolute paths keep working). A
#                        bare name without '/' that is not a file is looked up
#                        in PATH (e.g. --file ib_write_bw). The shared
#                        libraries of every ELF executable/.so copied are added
#                        automatically (ldd). Repeatable.
#   --verbs-libs         copy libibverbs.so.1 and librdmacm.so.1 under their sonames:
#                        rdmakit dlopens them, so the ldd scan of --file does not
#                        see them
#   --env NAME=VALUE     export NAME in the VM (repeatable)
#   --workdir VMPATH     working directory for SCRIPT (default /)
#   --timeout SEC        overall limit incl. boot (default 600); exit 124 if hit
#   --boot-timeout SEC   if the guest's init has not started after SEC (default
#                        90), kill QEMU and retry once
#   --mem MB             guest RAM (default 1024; the initramfs lives in it)
#   --smp N              guest CPUs (default 2)
#   --verbose            show kernel boot messages and harness details
#   --keep               keep the temporary work dir (initramfs, console log)
#   -h, --help
#
# SCRIPT is a host file; it is copied into the VM and run with /bin/sh (dash)
# with ARGS, stdin /dev/null. PATH inside has the host's ip, rdma and
# ibv_devinfo before busybox's applets. Environment given to SCRIPT:
#   RDMAKIT_VM_NDEVS      1 or 2
#   RDMAKIT_VM_DEV0       rxe0          RDMAKIT_VM_DEV1     rxe1      (2 devs)
#   RDMAKIT_VM_NETDEV0    d0 / v0       RDMAKIT_VM_NETDEV1  v1        (2 devs)
#   RDMAKIT_VM_ADDR0      169.254.7.1 (1 dev) / 169.254.1.1 (2 devs)
#   RDMAKIT_VM_ADDR1      169.254.1.2                                  (2 devs)
#   RDMAKIT_VM_GIDIDX0/1  GID index of the RoCEv2 IPv4 GID of each device
#                         (pass to perftest -x; GID 0 is the IPv6 link-local one)
#   RDMAKIT_VM_CPUS       guest CPU count
#
# Exit status: SCRIPT's status; 124 on timeout; 125 if the harness or the VM
# setup failed (including "no exit marker", e.g. a kernel panic).
# Output of the VM console is streamed to stdout as it comes; harness messages
# go to stderr prefixed "run-in-vm:".
#
# Environment: RDMAKIT_SOFTROCE_CACHE (see prepare.sh), QEMU (binary to use),
# RDMAKIT_VM_APPEND (extra kernel command-line parameters).
# Inside the VM, /proc, /sys and /dev are mounts (files cannot go there); the
# root filesystem (incl. /tmp) is the writable initramfs, i.e. guest RAM.
set -euo pipefail
# Any unexpected failure names its line instead of exiting silently.
trap 'echo "run-in-vm: error: command failed (status $?) at line $LINENO" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${RDMAKIT_SOFTROCE_CACHE:-$repo/build/softroce-cache}"
t_start=$EPOCHREALTIME

msg() { echo "run-in-vm: $*" >&2; }
die() { echo "run-in-vm: error: $*" >&2; exit 125; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}'; }

# --- command line -------------------------------------------------------------
ndevs=1 timeout=600 boot_timeout=90 mem=1024 smp=2 verbose=0 keep=0
workdir=/ script="" command=""
files=() envs=() args=()
while (($#)); do
    case "$1" in
        --two-devices) ndevs=2 ;;
        --file) [[ $# -ge 2 ]] || die "--file needs an argument"; files+=("$2"); shift ;;
        --verbs-libs)
            for so in libibverbs.so.1 librdmacm.so.1; do
                files+=("$(readlink -f "/usr/lib/x86_64-linux-gnu/$so"):/usr/lib/x86_64-linux-gnu/$so")
            done ;;
        --env) [[ $# -ge 2 && "$2" == [A-Za-z_]*=* ]] || die "--env needs NAME=VALUE"; envs+=("$2"); shift ;;
        --workdir) [[ $# -ge 2 ]] || die "--workdir needs a path"; workdir="$2"; shift ;;
        --timeout) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--timeout needs seconds"; timeout="$2"; shift ;;
        --boot-timeout) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--boot-timeout needs seconds"; boot_timeout="$2"; shift ;;
        --mem) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--mem needs MB"; mem="$2"; shift ;;
        --smp) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--smp needs a count"; smp="$2"; shift ;;
        --verbose) verbose=1 ;;
        --keep) keep=1 ;;
        -c) [[ $# -ge 2 ]] || die "-c needs a command"; command="$2"; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; [[ $# -ge 1 ]] || die "missing SCRIPT after --"; script="$1"; shift; args=("$@"); break ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[[ -n "$script" || -n "$command" ]] || die "nothing to run: give '-- SCRIPT [ARGS]' or -c CMD (see --help)"
[[ -n "$script" && -n "$command" ]] && die "give either -- SCRIPT or -c, not both"
[[ -z "$script" || -f "$script" ]] || die "script '$script' not found"
[[ "$workdir" == /* ]] || die "--workdir must be an absolute path in the VM"

# --- kernel -------------------------------------------------------------------
# prepare.sh asks apt which kernel is current; once a kernel is cached, keep
# using it (faster, and stable) until prepare.sh is run again explicitly.
# A changed modules.roots makes prepare.sh collect the modules again.
wanted_roots="$(grep -v -e '^#' -e '^ *$' "$here/modules.roots" | tr -d ' ')"
if [[ ! -s "$cache/current" || ! -e "$(cat "$cache/current")/.complete" ||
      "$(cat "$(cat "$cache/current")/modules/roots" 2>/dev/null)" != "$wanted_roots" ]]; then
    "$here/prepare.sh" --quiet || die "prepare.sh failed"
fi
kdir="$(cat "$cache/current")"
[[ -e "$kdir/vmlinux" ]] || die "$kdir/vmlinux missing; rerun prepare.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/rdmakit-vm.XXXXXX")"
qpid="" 
cleanup() {
    [[ -n "$qpid" ]] && kill "$qpid" 2>/dev/null || true
    if ((keep)); then msg "kept work dir $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'msg "interrupted"; exit 130' INT TERM

# --- staging helpers ----------------------------------------------------------
# A staging root mirrors the guest filesystem. /lib and /lib64 are symlinks into
# /usr as on merged-/usr Debian, so libraries land in one place whatever path
# ldd printed.
new_root() {
    mkdir -p "$1/usr/lib" "$1/usr/lib64" "$1/usr/bin" "$1/usr/sbin"
    ln -sfn usr/lib "$1/lib"
    ln -sfn usr/lib64 "$1/lib64"
}

is_elf() { [[ "$(head -c 4 "$1" 2>/dev/null | od -An -t x1 | tr -d ' \n')" == 7f454c46 ]]; }

# libs_of FILE: set LIBS to the absolute paths of the shared libraries FILE
# needs (a global, not output, so that die() inside really ends the script).
libs_of() {
    local out line
    LIBS=()
    # ldd fails for static executables and non-dynamic files: nothing needed.
    out="$(ldd "$1" 2>/dev/null)" || return 0
    while IFS= read -r line; do
        line="${line#"${line%%[![:space:]]*}"}"
        case "$line" in
            *"=> not found"*) die "$1 needs ${line%% =>*}, which ldd cannot find on the host" ;;
            *"=> /"*) line="${line#*=> }"; LIBS+=("${line%% (*}") ;;
            /*) LIBS+=("${line%% (*}") ;;
        esac
    done <<<"$out"
}

# put ROOT HOSTPATH [GUESTPATH]: copy a file, dereferencing symlinks.
put() {
    local dst="$1${3:-$2}"
    mkdir -p "$(dirname "$dst")"
    cp -L "$2" "$dst"
}

# --- base initramfs (cached) ---------------------------------------------------
# Everything that does not depend on the test: busybox, dash, ip, rdma, tc
# (busybox's lacks netem), ibv_devinfo, the rxe userspace provider, kernel
# modules, /init.
tool() { command -v "$1" 2>/dev/null || die "host tool $1 not found (run prepare.sh for the package list)"; }
rxe_provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
base_bins=("$(tool dash)" "$(tool ip)" "$(tool rdma)" "$(tool tc)" "$(tool ibv_devinfo)" "$rxe_provider")
# glibc dlopens libgcc_s for thread cancellation/unwinding; without it threads abort.
libgcc="$(ldconfig -p 2>/dev/null | awk '/libgcc_s\.so\.1 .*x86-64/ && !f {print $NF; f = 1}')"
[[ -n "$libgcc" ]] || libgcc=/lib/x86_64-linux-gnu/libgcc_s.so.1
[[ -e "$libgcc" ]] || die "libgcc_s.so.1 not found on the host"
base_libs=()
for b in "${base_bins[@]}"; do libs_of "$b"; base_libs+=("${LIBS[@]}"); done
base_libs+=("$libgcc")
mapfile -t base_libs < <(printf '%s\n' "${base_libs[@]}" | sort -u)
busybox_bin="$(tool busybox)"

# The cache key covers everything that goes into the base image.
key="$( {
    cat "$here/vm-init.sh" "${BASH_SOURCE[0]}"
    echo "$kdir"
    stat -L -c '%n %s %Y' "$busybox_bin" "${base_bins[@]}" "${base_libs[@]}" \
        /etc/libibverbs.d/rxe.driver "$kdir/modules/"*
} | sha256sum | cut -c1-16)"
base="$cache/initramfs-base-$key.cpio"

if [[ ! -s "$base" ]]; then
    ((verbose)) && msg "building base initramfs $base"
    b="$work/base"
    new_root "$b"
    mkdir -p "$b/bin" "$b/sbin" "$b/proc" "$b/sys" "$b/dev" "$b/tmp" "$b/run" "$b/etc" "$b/rdmakit/modules"
    cp "$busybox_bin" "$b/bin/busybox"
    # busybox applets go to /bin only; PATH lists /usr/sbin:/usr/bin first so
    # the real ip/rdma win.
    for a in $("$busybox_bin" --list); do
        [[ "$a" == busybox || "$a" == sh ]] || ln -sf busybox "$b/bin/$a"
    done
    cp -L "$(tool dash)" "$b/bin/dash"
    ln -sf dash "$b/bin/sh"
    for f in "${base_bins[@]}" "${base_libs[@]}"; do put "$b" "$f"; done
    mkdir -p "$b/etc/libibverbs.d"
    cp /etc/libibverbs.d/rxe.driver "$b/etc/libibverbs.d/"
    cp "$kdir/modules/"* "$b/rdmakit/modules/"
    cp "$here/vm-init.sh" "$b/init"
    chmod 755 "$b/init"
    # Uncompressed cpio: decompressing gzip inside an emulated CPU costs more
    # than QEMU copying a few extra MB.
    (cd "$b" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$base.tmp.$$"
    mv "$base.tmp.$$" "$base"
    # Base images of other keys are stale; spare recent ones in case another
    # checkout sharing this cache is using one right now.
    find "$cache" -maxdepth 1 -name 'initramfs-base-*.cpio' ! -name "$(basename "$base")" -mmin +60 -delete
fi

# --- per-run initramfs ----------------------------------------------------------
r="$work/run"
new_root "$r"
mkdir -p "$r/rdmakit"
declare -A have=()
for f in "${base_libs[@]}"; do have[$f]=1; done
run_libs=()

# collect_libs HOSTFILE: queue the libraries of an ELF file not in the base.
collect_libs() {
    local l
    libs_of "$1"
    for l in "${LIBS[@]}"; do
        [[ -z "${have[$l]:-}" ]] || continue
        have[$l]=1
        run_libs+=("$l")
    done
}

for spec in "${files[@]}"; do
    hostp="${spec%%:*}"
    if [[ "$spec" == *:* ]]; then guestp="${spec#*:}"; else guestp=""; fi
    if [[ "$hostp" != */* && ! -e "$hostp" ]]; then
        hostp="$(command -v "$hostp")" || die "--file $spec: not a file and not a command in PATH"
    fi
    [[ -e "$hostp" ]] || die "--file $spec: $hostp does not exist"
    hostp="$(realpath "$hostp")"
    [[ -n "$guestp" ]] || guestp="$hostp"
    [[ "$guestp" == /* ]] || die "--file $spec: VM path must be absolute"
    # These get mounts on top inside the VM, which would hide the files.
    [[ "$guestp" =~ ^/(proc|sys|dev)(/|$) ]] && die "--file $spec: /proc, /sys and /dev are mounted over in the VM"
    mkdir -p "$(dirname "$r$guestp")"
    if [[ -d "$hostp" ]]; then
        cp -a "$hostp" "$r$guestp"
        # Only executables and *.so* can be dynamic ELF objects worth ldd-ing.
        while IFS= read -r -d '' f; do
            is_elf "$f" && collect_libs "$f"
        done < <(find "$hostp" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
    else
        cp -L --preserve=mode "$hostp" "$r$guestp"
        is_elf "$hostp" && collect_libs "$hostp"
    fi
done
for l in "${run_libs[@]}"; do put "$r" "$l"; done
((verbose && ${#run_libs[@]})) && msg "extra libraries: ${run_libs[*]}"

# Single-quote for the guest's sh.
sq() { local s="${1//\'/\'\\\'\'}"; printf "'%s'" "$s"; }
{
    echo "export RDMAKIT_VM_NDEVS=$ndevs RDMAKIT_VM_CPUS=$smp RDMAKIT_VM_DEV0=rxe0"
    if ((ndevs == 1)); then
        echo "export RDMAKIT_VM_NETDEV0=d0 RDMAKIT_VM_ADDR0=169.254.7.1"
    else
        echo "export RDMAKIT_VM_NETDEV0=v0 RDMAKIT_VM_ADDR0=169.254.1.1"
        echo "export RDMAKIT_VM_DEV1=rxe1 RDMAKIT_VM_NETDEV1=v1 RDMAKIT_VM_ADDR1=169.254.1.2"
    fi
    echo "export RDMAKIT_VM_WORKDIR=$(sq "$workdir")"
    for e in "${envs[@]}"; do echo "export ${e%%=*}=$(sq "${e#*=}")"; done
} >"$r/rdmakit/env"
{
    printf 'set --'
    for a in "${args[@]}"; do printf ' %s' "$(sq "$a")"; done
    echo
} >"$r/rdmakit/args"
if [[ -n "$script" ]]; then cp "$script" "$r/rdmakit/test.sh"; else printf '%s\n' "$command" >"$r/rdmakit/test.sh"; fi

# The kernel unpacks concatenated cpio archives in order into the same rootfs.
(cd "$r" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$work/run.cpio"
cat "$base" "$work/run.cpio" >"$work/initrd"
((verbose)) && msg "initrd $(du -h "$work/initrd" | cut -f1) built in $(elapsed "$t_start") s"

# --- boot -------------------------------------------------------------------------
qemu="${QEMU:-qemu-system-x86_64}"
cmdline="console=ttyS0 panic=-1 mitigations=off ${RDMAKIT_VM_APPEND:-}"
((verbose)) || cmdline+=" quiet"
deadline=$(awk -v a="$t_start" -v t="$timeout" 'BEGIN{printf "%.3f", a + t}')
past() { awk -v d="$1" -v n="$EPOCHREALTIME" 'BEGIN{exit !(n >= d)}'; }

# attempt N: boot once, streaming the console; sets $outcome to one of
# done / boot-timeout / timeout.
attempt() {
    local log="$work/console.$1.log" t0=$EPOCHREALTIME booted=0 bootdl streampid
    bootdl=$(awk -v a="$t0" -v t="$boot_timeout" 'BEGIN{printf "%.3f", a + t}')
    : >"$log"
    # -nodefaults: no NIC, no VGA, nothing but what is listed. The console goes
    # to a file that tail streams, so the watchdog can read it too.
    "$qemu" -accel tcg -cpu max -m "$mem" -smp "$smp" -machine pc \
        -kernel "$kdir/vmlinux" -initrd "$work/initrd" -append "$cmdline" \
        -display none -nodefaults -no-reboot -serial "file:$log" \
        </dev/null 2>"$work/qemu.$1.err" &
    qpid=$!
    tail -n +1 -s 0.1 --pid="$qpid" -f "$log" | tr -d '\r' &
    streampid=$!
    outcome="done"
    while kill -0 "$qpid" 2>/dev/null; do
        if ((!booted)); then
            if grep -q RDMAKIT-VM-BOOTED "$log"; then
                booted=1
                boot_s=$(elapsed "$t0")
                ((verbose)) && msg "guest init started after $boot_s s"
            elif past "$bootdl"; then
                outcome=boot-timeout
                break
            fi
        fi
        if past "$deadline"; then outcome=timeout; break; fi
        sleep 0.2
    done
    if [[ $outcome != "done" ]]; then kill "$qpid" 2>/dev/null || true; fi
    wait "$qpid" 2>/dev/null || true
    qpid=""
    wait "$streampid" 2>/dev/null || true
    lastlog="$log"
}

boot_s="?"
attempt 1
if [[ $outcome == boot-timeout ]]; then
    msg "guest did not start within ${boot_timeout}s; killing QEMU and retrying once"
    attempt 2
fi

case $outcome in
    timeout) msg "overall timeout of ${timeout}s hit; QEMU killed"; exit 124 ;;
    boot-timeout) cat "$work"/qemu.*.err >&2 || true; die "guest did not boot twice in a row" ;;
esac
marker="$(grep -a -o 'RDMAKIT-VM-EXIT=[0-9]*' "$lastlog" | tail -n 1 || true)"
if [[ -z "$marker" ]]; then
    cat "$work"/qemu.*.err >&2 || true
    die "VM ended without an exit marker (kernel panic or QEMU failure?)"
fi
rc="${marker#RDMAKIT-VM-EXIT=}"
msg "exit status $rc; guest init after ${boot_s} s, total $(elapsed "$t_start") s"
exit "$rc"
