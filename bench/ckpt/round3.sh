#!/usr/bin/env bash
# Issue #29's checkpoint rows, side by side: the engine's persist (write + fsyncs + rename) and restore
# (verify + load) against fio with O_DIRECT (write with --end_fsync=1, read) of the same bytes, alternating,
# REPS repetitions per placement; bench/ckpt/summarize.py prints medians and ratios per placement.
#   bench/ckpt/round3.sh [BUILD=build] [DIR=/var/tmp/rdmakit-ckpt-r3] [MiB=1024] [REPS=5]
# Placements: "unpinned" (the scheduler spreads the engine's threads over the cores) and "core0" (every
# thread of both programs under taskset -c 0).
# fio runs at its best setting on this disk (FIO_DEPTH=32, FIO_BS=16M: 1.29 GB/s against 0.66-0.91 GB/s at
# the engine's own 4 x 4 MiB), so the ratio is against what the disk can do, not against a handicapped peer.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
dir=${2:-/var/tmp/rdmakit-ckpt-r3}
mib=${3:-1024}
reps=${4:-5}
fio_depth=${FIO_DEPTH:-32}
fio_bs=${FIO_BS:-16M}
for placement in unpinned core0; do
  pin=(); [ "$placement" = core0 ] && pin=(taskset -c 0)
  out=bench/ckpt/results-round3-$placement.jsonl
  rm -rf "$dir" && mkdir -p "$dir"
  : > "$out"
  fs=$(df -T "$dir" | awk 'NR==2 {print $2 " on " $1}')
  echo "{\"what\": \"machine\", \"fs\": \"$fs\", \"cores\": $(nproc), \"placement\": \"$placement\"}" >> "$out"
  for rep in $(seq "$reps"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    r=$("${pin[@]}" "$build/tools/rdmakit-ckpt" bench "$dir/engine" "$mib" 1)
    rm -rf "$dir/engine"
    echo "$r" | /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r.update(size_mib=int(sys.argv[1]), rep=int(sys.argv[2]), what="rdmakit", load=float(sys.argv[3])); print(json.dumps(r))' "$mib" "$rep" "$load" | tee -a "$out"
    w=$("${pin[@]}" fio --name=ckpt-fio --filename="$dir/fio.data" --direct=1 --rw=write --bs="$fio_bs" --iodepth="$fio_depth" --size="${mib}M" \
        --ioengine=io_uring --end_fsync=1 --output-format=terse --terse-version=3 | awk -F';' '{printf "%.3f", $48*1024/1e9}')
    rd=$("${pin[@]}" fio --name=ckpt-fio --filename="$dir/fio.data" --direct=1 --rw=read --bs="$fio_bs" --iodepth="$fio_depth" --size="${mib}M" \
        --ioengine=io_uring --output-format=terse --terse-version=3 | awk -F';' '{printf "%.3f", $7*1024/1e9}')
    rm -f "$dir/fio.data"
    echo "{\"write_GBps\": $w, \"read_GBps\": $rd, \"size_mib\": $mib, \"rep\": $rep, \"what\": \"fio\", \"iodepth\": $fio_depth, \"bs\": \"$fio_bs\", \"load\": $load}" | tee -a "$out"
  done
  rm -rf "$dir"
  echo "== $placement"
  /usr/bin/python3 bench/ckpt/summarize.py "$out"
done
