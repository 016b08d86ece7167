#!/usr/bin/env bash
# Issue #27's replica row, side by side: the peer-memory replica push of a MiB-sized checkpoint (its WRITEs
# in 4 MiB pieces into `rdmakit-ckpt serve`'s memory, the manifest, the server's verified commit) against
# `rdmakit-perf write_bw` at the same message size (4 MiB) over the same transport, walking the same working
# set (--working-set MiB: both sides' buffers are DRAM-resident, as the push's staging and the server's
# slots are), and at 4 MiB in one cache-resident buffer (write_bw's default). Alternating, REPS repetitions
# per placement; prints one JSON line per measurement, then the medians and ratios.
#   bench/ckpt/replica_vs_write_bw.sh [BUILD=build] [DIR=/var/tmp/rdmakit-replica-bench] [MiB=256] [REPS=5]
# Placements: "unpinned", and "core0" (every process under taskset -c 0; write_bw in --mode block there:
# two spinning pollers on one core starve each other). Transport: RDMAKIT_TRANSPORT (default tcp).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "${1:-build}" && pwd)
dir=${2:-/var/tmp/rdmakit-replica-bench}
mib=${3:-256}
reps=${4:-5}
transport=${RDMAKIT_TRANSPORT:-tcp}
export RDMAKIT_TRANSPORT=$transport
perf=$build/tools/rdmakit-perf
ckpt=$build/tools/rdmakit-ckpt
out=$(mktemp /tmp/replica-bench.XXXXXX.jsonl)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -f "$out"' EXIT

# One write_bw run (server and client under the same placement); prints its average GB/s.
write_bw() {
  local port=$1; shift
  "${pin[@]}" "$perf" write_bw -p "$port" --transport "$transport" "${mode[@]}" "$@" > /dev/null 2>&1 &
  local spid=$!
  sleep 0.3
  "${pin[@]}" "$perf" write_bw 127.0.0.1 -p "$port" --transport "$transport" "${mode[@]}" "$@" |
    awk '$1 ~ /^[0-9]+$/ { printf "%.3f\n", $4 / 1000 }'
  wait "$spid"
}

for placement in unpinned core0; do
  pin=(); mode=()
  if [ "$placement" = core0 ]; then pin=(taskset -c 0); mode=(--mode block); fi
  port=23600
  "${pin[@]}" "$ckpt" serve --listen 127.0.0.1:$((port - 1)) --budget $((4 * mib)) > /dev/null &
  server_pid=$!
  sleep 0.5
  for rep in $(seq "$reps"); do
    n=$((6 * mib / 4))  # six walks of the working set, 4 MiB per message
    ws=$(write_bw $((port + 2 * rep)) -s 4M --working-set "${mib}M" -n "$n")
    one=$(write_bw $((port + 2 * rep + 1)) -s 4M -n "$n")
    rm -rf "$dir" && mkdir -p "$dir"
    # Rounds 2-4 count: round 1 faults in the server's slots.
    pushes=$("${pin[@]}" "$ckpt" bench-replica "$dir/d" 127.0.0.1:$((port - 1)) "$mib" 4 |
      sed -n 's/.*"replica_GBps": \([0-9.]*\).*/\1/p' | tail -n 3 | tr '\n' ' ')
    for gbps in $pushes; do
      echo "{\"placement\": \"$placement\", \"rep\": $rep, \"what\": \"replica\", \"GBps\": $gbps}" | tee -a "$out"
    done
    echo "{\"placement\": \"$placement\", \"rep\": $rep, \"what\": \"write_bw_ws\", \"GBps\": $ws}" | tee -a "$out"
    echo "{\"placement\": \"$placement\", \"rep\": $rep, \"what\": \"write_bw_one\", \"GBps\": $one}" | tee -a "$out"
  done
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
done
rm -rf "$dir"
/usr/bin/python3 - "$out" "$mib" "$transport" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"replica push of {sys.argv[2]} MiB vs write_bw -s 4M over {sys.argv[3]} (medians)")
print("| placement | replica push | write_bw, same working set | ratio | write_bw, one 4 MiB buffer | ratio |")
print("|---|---|---|---|---|---|")
for placement in ("unpinned", "core0"):
    med = {w: statistics.median(r["GBps"] for r in rows if r["placement"] == placement and r["what"] == w)
           for w in ("replica", "write_bw_ws", "write_bw_one")}
    print(f"| {placement} | {med['replica']:.2f} GB/s | {med['write_bw_ws']:.2f} GB/s | "
          f"{med['replica'] / med['write_bw_ws']:.2f}x | {med['write_bw_one']:.2f} GB/s | "
          f"{med['replica'] / med['write_bw_one']:.2f}x |")
EOF
