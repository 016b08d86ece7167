#!/bin/bash
# Transfer engine batch throughput vs raw `rdmakit-perf write_bw` on the same transport, same run,
# alternating A B A B. rdmakit-perf runs in both completion modes (poll, block) and the better one is the
# peer. Prints one markdown row per (transport, block, batch) with the medians and their ratio.
#   BUILD=build bench/xfer/compare.sh [reps] [seconds]
set -u
build=${BUILD:-build}
reps=${1:-3} secs=${2:-3}
perf=$build/tools/rdmakit-perf xbench=$build/tools/rdmakit-xfer-bench
port=18900
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
raw() {  # raw <transport> <size> <mode> -> GB/s
  port=$((port + 1))
  "$perf" write_bw --transport "$1" -p $port > /dev/null 2>&1 &
  local server=$!
  sleep 0.3
  "$perf" write_bw 127.0.0.1 --transport "$1" -p $port -s "$2" -D "$secs" --mode "$3" --csv 2>/dev/null |
    awk -F, 'NR==2 {print $8/1000}'
  wait $server
}
engine() {  # engine <transport> <block> <batch> <segment bytes> -> GB/s
  "$xbench" --transport "$1" --block "$2" --batch "$3" --segment "$4" --duration "$secs" 2>/dev/null |
    awk -F'|' '$2 ~ /tcp|shm|verbs/ && $8+0 > 0 {print $8+0}'
}
echo "uptime: $(uptime)"
# rdmakit-perf reuses one message-sized buffer on each side; "same buffer" runs the engine on the same
# footprint (every request of a batch on one block-sized slot: nothing to coalesce), which is the ratio
# that counts; "distinct slots" (each request its own slot, batch x block bytes: adjacent, so coalesced)
# is shown beside it: more realistic, but it runs from a bigger cache footprint than the peer.
echo "| transport | block | batch | rdmakit-perf write_bw GB/s (poll / block, median of $reps) | engine, same buffer GB/s (runs) | ratio vs the better | engine, distinct slots GB/s (runs) |"
echo "|---|---|---|---|---|---|---|"
for transport in ${TRANSPORTS:-tcp shm}; do
  for config in "65536 16" "1048576 4" "16384 256"; do
    set -- $config
    poll=() block=() eng=() distinct=()
    for r in $(seq "$reps"); do
      poll+=("$(raw "$transport" "$1" poll)")
      eng+=("$(engine "$transport" "$1" "$2" "$1")")
      block+=("$(raw "$transport" "$1" block)")
      distinct+=("$(engine "$transport" "$1" "$2" $(($1 * $2)))")
    done
    p=$(printf '%s\n' "${poll[@]}" | median) b=$(printf '%s\n' "${block[@]}" | median)
    e=$(printf '%s\n' "${eng[@]}" | median) d=$(printf '%s\n' "${distinct[@]}" | median)
    best=$(awk -v p="$p" -v b="$b" 'BEGIN {print (p > b ? p : b)}')
    ratio=$(awk -v e="$e" -v best="$best" 'BEGIN {printf "%.2fx", e / best}')
    echo "| $transport | $1 | $2 | $p / $b | $e (${eng[*]}) | $ratio | $d (${distinct[*]}) |"
  done
done
