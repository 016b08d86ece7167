#!/usr/bin/env bash
# prepare.sh - fetch and unpack the guest kernel used by the Soft-RoCE harness.
#
# Usage: tests/softroce/prepare.sh [--quiet]
#
# Idempotent. Results go to the cache dir
#   ${RDMAKIT_SOFTROCE_CACHE:-<repo>/build/softroce-cache}
# and consist of:
#   debs/<linux-image>.deb                 the Debian kernel package (apt-get download)
#   kernel-<ver>/vmlinux                   uncompressed ELF kernel (boots ~3.5 s faster
#                                          under TCG than the bzImage, which would first
#                                          have to xz-decompress itself in emulation)
#   kernel-<ver>/vmlinuz                   the original bzImage (fallback)
#   kernel-<ver>/modules/*.ko              uncompressed modules needed for rdma_rxe
#   kernel-<ver>/modules/order             insmod order (dependencies first)
#   kernel-<ver>/modules/roots             the module list (modules.roots) they were collected for: a
#                                          changed list collects them again from the cached .deb
#   current                                file naming the ready kernel-<ver> directory
#
# Environment:
#   RDMAKIT_SOFTROCE_CACHE       cache dir (see above)
#   RDMAKIT_SOFTROCE_KERNEL_PKG  kernel package to use instead of the one that
#                                linux-image-amd64 depends on
#
# Only the Debian archive is contacted (via apt-get), nothing else.
set -euo pipefail
# Any unexpected failure names its line instead of exiting silently.
trap 'echo "prepare.sh: error: command failed (status $?) at line $LINENO" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${RDMAKIT_SOFTROCE_CACHE:-$repo/build/softroce-cache}"
quiet=0
[[ "${1:-}" == "--quiet" ]] && quiet=1

say() { [[ $quiet == 1 ]] || echo "prepare.sh: $*" >&2; }
die() { echo "prepare.sh: error: $*" >&2; exit 1; }

# --- host prerequisites -----------------------------------------------------
# Tools needed here and by run-in-vm.sh; report every missing one at once, with
# the Debian package that provides it.
check_tools() {
    local missing=() pkgs=() t p
    local -A need=(
        [qemu-system-x86_64]=qemu-system-x86 [cpio]=cpio [gzip]=gzip [xz]=xz-utils
        [dpkg-deb]=dpkg [apt-get]=apt [ldd]=libc-bin [ip]=iproute2 [rdma]=iproute2
        [dash]=dash [ibv_devinfo]=ibverbs-utils [od]=coreutils [dd]=coreutils [tc]=iproute2
    )
    for t in "${!need[@]}"; do
        command -v "$t" >/dev/null 2>&1 || { missing+=("$t"); pkgs+=("${need[$t]}"); }
    done
    # busybox must be the static build: the initramfs has no libc for it otherwise
    # we would need to ship its libs too, and busybox-static is what setup.sh installs.
    if ! command -v busybox >/dev/null 2>&1; then
        missing+=(busybox); pkgs+=(busybox-static)
    elif ldd "$(command -v busybox)" >/dev/null 2>&1; then
        missing+=("static busybox"); pkgs+=(busybox-static)
    fi
    [[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ]] || {
        missing+=("librxe-rdmav34.so (rxe userspace provider)"); pkgs+=(ibverbs-providers); }
    [[ -e /etc/libibverbs.d/rxe.driver ]] || {
        missing+=(/etc/libibverbs.d/rxe.driver); pkgs+=(ibverbs-providers); }
    if ((${#missing[@]})); then
        p="$(printf '%s\n' "${pkgs[@]}" | sort -u | tr '\n' ' ')"
        die "missing host tools/files: ${missing[*]}
    install them with: apt-get install -y $p"
    fi
}
check_tools

mkdir -p "$cache/debs"
# The modules the VM loads (and their dependencies): one name a line in modules.roots.
wanted_roots="$(grep -v -e '^#' -e '^ *$' "$here/modules.roots" | tr -d ' ')"
mapfile -t roots <<<"$wanted_roots"
# ready DIR: a kernel prepared for these roots.
ready() { [[ -e "$1/.complete" && "$(cat "$1/modules/roots" 2>/dev/null)" == "$wanted_roots" ]]; }

# --- which kernel -----------------------------------------------------------
pkg="${RDMAKIT_SOFTROCE_KERNEL_PKG:-}"
if [[ -z "$pkg" ]]; then
    # The versioned image package the linux-image-amd64 metapackage points at.
    pkg="$(apt-cache depends linux-image-amd64 2>/dev/null |
           awk '/Depends: linux-image-[0-9]/ && !f {print $2; f = 1}')" || true
    if [[ -z "$pkg" ]]; then
        # apt lists may be empty (fresh container); a ready cache is still usable.
        if [[ -s "$cache/current" ]] && ready "$(cat "$cache/current")"; then
            say "apt-cache knows no linux-image-amd64; using cached $(cat "$cache/current")"
            exit 0
        fi
        # A cached package whose modules must be collected again (modules.roots changed).
        deb="$(ls "$cache/debs/linux-image-"*.deb 2>/dev/null | head -n1 || true)"
        [[ -n "$deb" ]] || die "cannot resolve linux-image-amd64 (run 'apt-get update' first?)"
        pkg="$(basename "$deb")"
        pkg="${pkg%%_*}"
    fi
fi
kver="${pkg#linux-image-}"
kdir="$cache/kernel-$kver"

if ready "$kdir"; then
    echo "$kdir" >"$cache/current"
    say "kernel $kver already prepared in $kdir"
    exit 0
fi

# --- download -----------------------------------------------------------------
deb="$(ls "$cache/debs/${pkg}_"*.deb 2>/dev/null | head -n1 || true)"
if [[ -z "$deb" ]]; then
    say "downloading $pkg"
    # Sandbox user root: the _apt user may not be able to write into the cache dir.
    (cd "$cache/debs" && apt-get download -o APT::Sandbox::User=root "$pkg") >&2 ||
        die "apt-get download $pkg failed"
    deb="$(ls "$cache/debs/${pkg}_"*.deb | head -n1)"
fi

# --- extract, into a temp dir renamed at the end so a crash leaves no half state
tmp="$(mktemp -d "$cache/.tmp-kernel.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
say "extracting $(basename "$deb")"
dpkg-deb -x "$deb" "$tmp/root"
vmlinuz="$(ls "$tmp/root/boot/vmlinuz-"* | head -n1)"
moddir="$(ls -d "$tmp/root/lib/modules/"*/kernel | head -n1)"
mkdir -p "$tmp/out/modules"
cp "$vmlinuz" "$tmp/out/vmlinuz"

# --- vmlinux from the bzImage ------------------------------------------------
# The x86 boot protocol header says where the compressed kernel lives:
#   0x1f1 setup_sects (1 byte; the real-mode part is (setup_sects+1)*512 bytes)
#   0x248 payload_offset, 0x24c payload_length (LE32, relative to the protected-
#         mode part). Data after the compressed stream (the LE32 uncompressed
#         size) is ignored: xz --single-stream skips it, gzip warns (status 2).
le32() { od -An -t u4 -j "$2" -N 4 "$1" | tr -d ' '; }
u8() { od -An -t u1 -j "$2" -N 1 "$1" | tr -d ' '; }
[[ "$(dd if="$vmlinuz" bs=1 skip=514 count=4 status=none)" == "HdrS" ]] ||
    die "$vmlinuz is not a bzImage (no HdrS signature)"
setup_sects="$(u8 "$vmlinuz" $((0x1f1)))"
((setup_sects == 0)) && setup_sects=4
poff="$(le32 "$vmlinuz" $((0x248)))"
plen="$(le32 "$vmlinuz" $((0x24c)))"
start=$(((setup_sects + 1) * 512 + poff))
magic="$(od -An -t x1 -j "$start" -N 6 "$vmlinuz" | tr -d ' \n')"
case "$magic" in
    fd377a585a00*) dec=(xz -dc --single-stream) ;;
    1f8b*) dec=(gzip -dc) ;;
    28b52ffd*) dec=(zstd -dcq) ;;
    *) die "unknown kernel payload compression (magic $magic); only xz/gzip/zstd handled" ;;
esac
command -v "${dec[0]}" >/dev/null || die "need ${dec[0]} to unpack the kernel"
say "extracting vmlinux (${dec[0]} payload, $plen bytes at $start)"
dd if="$vmlinuz" iflag=skip_bytes,count_bytes skip="$start" count="$plen" bs=1M status=none | "${dec[@]}" >"$tmp/out/vmlinux" ||
    [[ $? == 2 && ${dec[0]} == gzip ]] ||
    die "decompressing the kernel payload failed"
[[ "$(head -c 4 "$tmp/out/vmlinux" | od -An -t x1 | tr -d ' \n')" == 7f454c46 ]] ||
    die "extracted vmlinux is not an ELF file"

# --- modules ------------------------------------------------------------------
# There is no modules.dep in the package (depmod runs at install time) and no
# kmod on the host necessarily, so read each module's "depends=" from its
# .modinfo strings and load dependencies first (depth-first, post-order).
# The roots come from modules.roots (read above).
declare -A path_of=() state=()
while IFS= read -r -d '' f; do
    n="$(basename "$f")"; n="${n%%.ko*}"; n="${n//-/_}"
    path_of[$n]="$f"
done < <(find "$moddir" -name '*.ko*' -print0)

order=()
visit() {
    local m="$1" f deps d
    [[ "${state[$m]:-}" == "done" ]] && return 0
    [[ "${state[$m]:-}" == busy ]] && die "module dependency cycle at $m"
    f="${path_of[$m]:-}"
    if [[ -z "$f" ]]; then
        # Built into the kernel: nothing to load.
        grep -q "/${m//_/[-_]}\.ko" "$tmp/root/lib/modules/"*/modules.builtin 2>/dev/null ||
            die "module $m not found in $pkg"
        state[$m]="done"; return 0
    fi
    state[$m]=busy
    local raw="$tmp/mod-$m.ko"
    case "$f" in
        *.ko.xz) xz -dc "$f" >"$raw" ;;
        *.ko.zst) zstd -dcq "$f" >"$raw" ;;
        *.ko.gz) gzip -dc "$f" >"$raw" ;;
        *) cp "$f" "$raw" ;;
    esac
    deps="$(tr '\0' '\n' <"$raw" | sed -n 's/^depends=//p' | head -n1)"
    for d in ${deps//,/ }; do visit "${d//-/_}"; done
    mv "$raw" "$tmp/out/modules/$m.ko"
    order+=("$m")
    state[$m]="done"
}
for r in "${roots[@]}"; do visit "$r"; done
printf '%s\n' "${order[@]}" >"$tmp/out/modules/order"
echo "$wanted_roots" >"$tmp/out/modules/roots"
say "modules: ${order[*]}"

echo "$pkg" >"$tmp/out/package"
touch "$tmp/out/.complete"
rm -rf "$kdir"
mv "$tmp/out" "$kdir"
echo "$kdir" >"$cache/current"
say "ready: $kdir"
