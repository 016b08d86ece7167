#!/bin/sh
# The transfer engine over verbs against raw `rdmakit-perf write_bw` on one Soft-RoCE device in the QEMU VM
# of tests/softroce, alternating, REPS times (medians), and the broadcast chain to 1-3 receivers.
#   BUILD=build bench/xfer/compare-verbs.sh [REPS] [SECONDS]
# Under TCG only the ratios mean anything (the emulator is the bottleneck of both sides alike).
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${BUILD:-$repo/build}" && pwd)
perf="$build/tools/rdmakit-perf" xbench="$build/tools/rdmakit-xfer-bench"
for tool in "$perf" "$xbench"; do
  [ -x "$tool" ] || { echo "compare-verbs: build $tool first (with the verbs transport)" >&2; exit 1; }
done
# libibverbs and librdmacm are dlopen'ed, so ldd does not see them: run-in-vm.sh copies them (--verbs-libs).
libs=--verbs-libs
log=$(mktemp)
echo "HOST load at start: $(cat /proc/loadavg)"
# shellcheck disable=SC2086
"$repo/tests/softroce/run-in-vm.sh" --timeout "${TIMEOUT:-2400}" $libs --file "$perf" --file "$xbench" \
  --file "$here/verbs-guest.sh" --env PERF="$perf" --env XBENCH="$xbench" --env REPS="${1:-5}" \
  --env SECS="${2:-3}" -- "$here/verbs-guest.sh" | tee "$log"
echo "HOST load at end: $(cat /proc/loadavg)"
echo
echo "| block | batch | rdmakit-perf write_bw GB/s (median) | engine GB/s (median) | engine / perf (median of per-rep ratios) |"
echo "|---|---|---|---|---|"
awk '$1 == "RESULT" { v[$3 " " $4 " " $5 " " $2] = $6; key[$4 " " $5] = 1; reps[$2] = 1 }
  function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (k in key) {
      n = 0
      for (r in reps) {
        p = v["rdmakit-perf " k " " r]; e = v["engine " k " " r]
        if (p > 0 && e > 0) { n++; P[n] = p; E[n] = e; R[n] = e / p }
      }
      split(k, kb, " ")
      if (n) printf "| %s | %s | %.4f | %.4f | %.2fx (%d reps) |\n", kb[1], kb[2], median(P, n), median(E, n), median(R, n), n
    }
  }' "$log" | sort -t'|' -k2 -n
