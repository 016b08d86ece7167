#!/usr/bin/env bash
# smoke.sh - prove the Soft-RoCE harness works: boots the VM once with one rxe
# device and once with two (veth pair), and runs smoke-guest.sh inside, which
# checks ibv_devinfo, rdma link, perftest ib_write_bw / ib_read_lat, rping and
# ucmatose (rdma_cm), and with two devices that the traffic crossed the veth.
#
# Usage: tests/softroce/smoke.sh [--one|--two] [extra run-in-vm.sh options]
#   default runs both configurations. Exit status non-zero if any fails.
set -euo pipefail
trap 'echo "smoke.sh: error: command failed (status $?) at line $LINENO" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
modes=(one two)
case "${1:-}" in
    --one) modes=(one); shift ;;
    --two) modes=(two); shift ;;
esac

for tool in ib_write_bw ib_read_lat rping ucmatose; do
    command -v "$tool" >/dev/null || {
        echo "smoke.sh: error: $tool not found (apt-get install perftest rdmacm-utils)" >&2; exit 1; }
done

status=0
summary=()
for mode in "${modes[@]}"; do
    opts=()
    [[ $mode == two ]] && opts+=(--two-devices)
    echo "===== smoke: $mode device(s)"
    t0=$EPOCHREALTIME
    rc=0
    "$here/run-in-vm.sh" "${opts[@]}" --timeout 900 "$@" \
        --file ib_write_bw --file ib_read_lat --file rping --file ucmatose \
        -- "$here/smoke-guest.sh" || rc=$?
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}')
    summary+=("$mode device(s): exit $rc in ${secs}s")
    ((rc == 0)) || status=1
done
echo "===== smoke summary"
printf '  %s\n' "${summary[@]}"
exit "$status"
