#!/usr/bin/env bash
# Checkpoint engine vs memcpy and fio, on one file system (default: a directory under /var/tmp).
#   bench/ckpt/run.sh [BUILD_DIR=build] [DIR=/var/tmp/rdmakit-ckpt-bench] [MiB=256] [ROUNDS=3]
# Prints the engine's JSON rows (snapshot stall vs memcpy of the same bytes, persist and restore GB/s),
# fio's sequential O_DIRECT write and read bandwidth of 1 GiB in 1 MiB blocks, and the checksum rate.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
dir=${2:-/var/tmp/rdmakit-ckpt-bench}
mib=${3:-256}
rounds=${4:-3}
rm -rf "$dir" && mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
df -T "$dir" | tail -1
echo "== engine ($mib MiB, $rounds rounds)"
"$build/tools/rdmakit-ckpt" bench "$dir/engine" "$mib" "$rounds"
echo "== engine, lazy mode (simulated forward/backward of 1.5x the memcpy; stall at wait_snapshot)"
"$build/tools/rdmakit-ckpt" bench-lazy "$dir/lazy" "$mib" "$rounds" 1.5
echo "== fio write (direct=1, bs=1M, size=1G)"
fio --name=ckpt-write --directory="$dir" --direct=1 --rw=write --bs=1M --size=1G --ioengine=io_uring \
    --end_fsync=1 --output-format=terse --terse-version=3 | awk -F';' '{printf "fio write: %.3f GB/s\n", $48*1024/1e9}'
echo "== fio read (direct=1, bs=1M, size=1G)"
fio --name=ckpt-write --directory="$dir" --direct=1 --rw=read --bs=1M --size=1G --ioengine=io_uring \
    --output-format=terse --terse-version=3 | awk -F';' '{printf "fio read: %.3f GB/s\n", $7*1024/1e9}'
echo "== checksum"
"$build/tests/unit_ckpt_checksum" --gtest_filter='*Throughput*' | grep 'GB/s'
