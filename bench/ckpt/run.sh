#!/usr/bin/env bash
# The checkpoint engine against its peers, interleaved, REPS times per state size, one file system:
#   bench/ckpt/run.sh [BUILD=build] [DIR=/var/tmp/rdmakit-ckpt-bench] [SIZES_MiB="256 1024 4096"] [REPS=3]
# Each repetition runs, one after the other: rdmakit-ckpt bench (eager: stall, save, persist, verify,
# restore), fio write and read (direct=1, io_uring, 4 MiB blocks, 4 in flight: the engine's chunking),
# torch.save and numpy.save of the same 8 tensors (bench/ckpt/save_baseline.py, /usr/bin/python3), the lazy
# stall, and (sizes whose replica fits in RAM) the peer-memory replica and rdmakit-perf write_bw with 4 MiB
# messages on the same transport (RDMAKIT_TRANSPORT, default tcp, over loopback).
# Every row is a JSON line in $OUT (default bench/ckpt/results.jsonl) with the size, the repetition and
# the load average when it started; bench/ckpt/summarize.py prints the medians and ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
dir=${2:-/var/tmp/rdmakit-ckpt-bench}
sizes=${3:-256 1024 4096}
reps=${4:-3}
out=${OUT:-bench/ckpt/results.jsonl}
transport=${RDMAKIT_TRANSPORT:-tcp}
ckpt="$build/tools/rdmakit-ckpt"
perf="$build/tools/rdmakit-perf"
py=/usr/bin/python3
rm -rf "$dir" && mkdir -p "$dir"
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
: > "$out"

fs=$(df -T "$dir" | awk 'NR==2 {print $2 " on " $1}')
echo "file system of $dir: $fs"
echo "{\"what\": \"machine\", \"fs\": \"$fs\", \"cores\": $(nproc), \"kernel\": \"$(uname -r)\"}" >> "$out"

# Appends one JSON row (its fields given as a JSON object) with the context added.
row() {  # size rep what json
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  $py -c 'import json,sys; r=json.loads(sys.argv[4]); r.update(size_mib=int(sys.argv[1]), rep=int(sys.argv[2]), what=sys.argv[3], load=float(sys.argv[5])); print(json.dumps(r))' \
    "$1" "$2" "$3" "$4" "$load" | tee -a "$out"
}

fio_job() {  # rw size_mib -> GB/s
  local field=7; [ "$1" = write ] && field=48
  fio --name=ckpt-fio --filename="$dir/fio.data" --direct=1 --rw="$1" --bs=4M --iodepth=4 --size="${2}M" \
      --ioengine=io_uring --end_fsync=1 --output-format=terse --terse-version=3 |
    awk -F';' -v f=$field '{printf "%.3f", $f*1024/1e9}'
}

start_server() {  # budget_mib -> sets server_pid and address
  "$ckpt" serve --budget "$1" > "$dir/serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do grep -q 'serving on' "$dir/serve.log" && break; sleep 0.1; done
  address=$(awk '/serving on/ {sub(",", "", $3); print $3}' "$dir/serve.log")
}

for mib in $sizes; do
  avail_mib=$(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo)
  disk_mib=$(df -m --output=avail "$dir" | tail -1)
  # rdmakit-ckpt bench holds the state, memcpy's target and staging (3x); the disk two checkpoints + fio.
  if (( avail_mib < mib * 3 + 2048 || disk_mib < mib * 4 + 2048 )); then
    echo "SKIP $mib MiB: $avail_mib MiB of RAM available (need $((mib * 3 + 2048))), $disk_mib MiB of disk (need $((mib * 4 + 2048)))"
    continue
  fi
  replica=0
  (( avail_mib >= mib * 5 + 2048 && mib <= 1024 )) && replica=1
  for rep in $(seq "$reps"); do
    echo "== $mib MiB, repetition $rep: $(uptime)"
    row "$mib" "$rep" rdmakit "$("$ckpt" bench "$dir/engine" "$mib" 1)"
    rm -rf "$dir/engine"
    row "$mib" "$rep" fio "{\"write_GBps\": $(fio_job write "$mib"), \"read_GBps\": $(fio_job read "$mib")}"
    rm -f "$dir/fio.data"
    row "$mib" "$rep" torch "$($py bench/ckpt/save_baseline.py torch "$dir" "$mib")"
    row "$mib" "$rep" numpy "$($py bench/ckpt/save_baseline.py numpy "$dir" "$mib")"
    rate=$("$build/tests/unit_ckpt_checksum" --gtest_filter='*Throughput*' | awk '/checksum64:/ {print $2}' || true)
    [ -n "$rate" ] && row "$mib" "$rep" checksum "{\"GBps\": $rate}"
    row "$mib" "$rep" lazy "$("$ckpt" bench-lazy "$dir/lazy" "$mib" 1 1.5)"
    rm -rf "$dir/lazy"
    if (( replica )); then
      start_server $((mib * 2 + 64))
      row "$mib" "$rep" replica "$("$ckpt" bench-replica "$dir/replica" "$address" "$mib" 1)"
      kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
      rm -rf "$dir/replica"
      port=$((18700 + rep))
      "$perf" write_bw --transport "$transport" -p $port > "$dir/perf.log" 2>&1 &
      perf_pid=$!
      sleep 0.5
      bw=$("$perf" write_bw 127.0.0.1 --transport "$transport" -p $port -s 4M -n $((mib / 4)) --json |
           $py -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["bw_avg_bytes_per_s"] / 1e9)')
      wait "$perf_pid" || true
      row "$mib" "$rep" write_bw "{\"transport\": \"$transport\", \"GBps\": $bw}"
    fi
  done
done
$py bench/ckpt/summarize.py "$out"
