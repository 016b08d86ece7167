#!/bin/bash
# Transfer engine batches on shm against their bound, same run, alternating per repetition: a one-thread
# memcpy of the same pieces (rdmakit-xfer-bench --memcpy: the same block, batch and footprint), the engine
# (this build, and an earlier one when BASE is set), and `rdmakit-perf write_bw` of one block (poll mode).
# Each config is "block batch segment": segment = block puts every request on one slot (nothing coalesces;
# rdmakit-perf's footprint), segment = block x batch gives each request its own, adjacent slot.
#   PIN="taskset -c 0" BASE=/path/to/old/build BUILD=build bench/xfer/memcpy-compare.sh reps secs "16384 256 16384" ...
# PIN prefixes every process (the engine's owner is its child and inherits the placement). PREPARED=1 adds
# the engine submitting the list it prepared once (rdmakit-xfer-bench --prepared) as another column.
# OWNER_CPU=N puts the engine's owner process (--owner-cpu) and rdmakit-perf's server on CPU N (the two
# processes on separate cores: PIN="taskset -c 0" OWNER_CPU=1).
set -u
build=${BUILD:-build} base=${BASE:-}
reps=${1:-5} secs=${2:-2}
shift 2
pin=${PIN:-}
port=$((19500 + RANDOM % 200))
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
perf() {  # perf <size> -> GB/s
  port=$((port + 1))
  local server_pin=$pin
  [ -n "${OWNER_CPU:-}" ] && server_pin="taskset -c $OWNER_CPU"
  $server_pin "$build"/tools/rdmakit-perf write_bw --transport shm -p $port > /dev/null 2>&1 &
  local server=$!
  sleep 0.3
  $pin "$build"/tools/rdmakit-perf write_bw 127.0.0.1 --transport shm -p $port -s "$1" -D "$secs" --mode poll \
    --csv 2>/dev/null | awk -F, 'NR==2 {print $8/1000}'
  wait $server
}
xbench() {  # xbench <build> <block> <batch> <segment> [--memcpy] -> GB/s
  local b=$1
  shift
  $pin "$b"/tools/rdmakit-xfer-bench --transport shm --block "$1" --batch "$2" --segment "$3" --duration "$secs" \
    ${4:-} ${OWNER_CPU:+--owner-cpu $OWNER_CPU} 2>/dev/null | awk -F'|' '$2 ~ /shm|memcpy/ && $8+0 > 0 {print $8+0}'
}
echo "uptime: $(uptime)  placement: ${pin:-unpinned}"
for config in "$@"; do
  set -- $config
  m=() e=() o=() p=() q=()
  for r in $(seq "$reps"); do
    m+=("$(xbench "$build" "$1" "$2" "$3" --memcpy)")
    e+=("$(xbench "$build" "$1" "$2" "$3")")
    [ -n "$base" ] && o+=("$(xbench "$base" "$1" "$2" "$3")")
    [ -n "${PREPARED:-}" ] && q+=("$(xbench "$build" "$1" "$2" "$3" --prepared)")
    p+=("$(perf "$1")")
  done
  mm=$(printf '%s\n' "${m[@]}" | median) em=$(printf '%s\n' "${e[@]}" | median) pm=$(printf '%s\n' "${p[@]}" | median)
  line="block $1 batch $2 segment $3: memcpy $mm (${m[*]}) | engine $em (${e[*]})"
  [ -n "$base" ] && line+=" | base $(printf '%s\n' "${o[@]}" | median) (${o[*]})"
  [ -n "${PREPARED:-}" ] && line+=" | prepared $(printf '%s\n' "${q[@]}" | median) (${q[*]})"
  line+=" | perf $pm (${p[*]})"
  line+=" | engine/memcpy $(awk -v a="$em" -v b="$mm" 'BEGIN {printf "%.2f", a / b}')"
  line+=" engine/perf $(awk -v a="$em" -v b="$pm" 'BEGIN {printf "%.2f", a / b}')"
  [ -n "${PREPARED:-}" ] &&
    line+=" prepared/memcpy $(printf '%s\n' "${q[@]}" | median | awk -v b="$mm" '{printf "%.2f", $1 / b}')" &&
    line+=" prepared/perf $(printf '%s\n' "${q[@]}" | median | awk -v b="$pm" '{printf "%.2f", $1 / b}')"
  [ -n "$base" ] && line+=" base/memcpy $(printf '%s\n' "${o[@]}" | median | awk -v b="$mm" '{printf "%.2f", $1 / b}')"
  echo "$line"
done
echo "uptime: $(uptime)"
