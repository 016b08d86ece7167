#!/bin/bash
# The data loader and file-segment benchmarks of issue #28, one command, alternating repetitions:
#   BUILD=build bench/xfer/dataloader.sh [reps=5] [seconds=5]
# 1. Samples/s of the data loader (2 trainer processes, batches of 32 random 64 KiB samples, every sample
#    checked) over the transfer engine's file segments (tcp loopback and shm; examples/python/xfer_dataloader.py
#    and the C++ examples/xfer_dataloader), against the same loader reading the shards locally with
#    numpy.fromfile and from a plain TCP server of the same files (os.sendfile of the asked ranges). The
#    trainers send every READ to the storage node (--via-owner), as trainers on other nodes do; the *_local
#    rows let them read the shard files themselves (the same-host path).
# 2. Random READs of 4 MiB and 64 KiB at queue depth 16: `fio --direct=1 --rw=randread --ioengine=io_uring` on
#    the owner's file (the NVMe bound) vs the engine's file-segment READ of the same file (bench/xfer/file_read.cpp,
#    built here; the reader sends every READ to the owner, as from another host), vs the engine's
#    memory-segment READ of the same bytes (--memory), and the same-host path (--local: the reader reads the
#    file itself, through the page cache) vs fio --direct=0 (the page cache too; both start with the file out
#    of the cache).
# Needs the library, the xfer_dataloader example and the Python module in $BUILD, fio, and /usr/bin/python3
# with numpy. The dataset and the fio file go to $BENCH_DIR (default /var/tmp: not tmpfs, O_DIRECT works there).
# Prints markdown tables of the medians (and every run) and the ratios.
set -u
build=${BUILD:-build}
reps=${1:-5} secs=${2:-5}
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=${BENCH_DIR:-/var/tmp}/rdmakit-dataloader-bench
python=/usr/bin/python3
loader="$python $here/examples/python/xfer_dataloader.py"
export PYTHONPATH=$build/python
mkdir -p "$dir/shards"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", (b > 0 ? a / b : 0)}'; }

bin=$build/bench-file-read
g++ -std=c++23 -O2 -I"$here/include" "$here/bench/xfer/file_read.cpp" -L"$build" -lrdmakit \
    -Wl,-rpath,"$(cd "$build" && pwd)" -o "$bin" || { echo "FAIL: building file_read"; exit 1; }

shape="--shards 16 --samples 256 --sample-kib 64"  # 256 MiB
$loader --dir "$dir/shards" $shape --source fromfile --trainers 1 --batches 1 > /dev/null ||
  { echo "FAIL: writing the dataset"; exit 1; }
batches=$((secs * 40))
py() {  # py <source> <transport> [--via-owner] -> samples/s over both trainers
  $loader --dir "$dir/shards" --keep $shape --source "$1" --transport "$2" --trainers 2 --batches $batches ${3:-} |
    awk '/^TOTAL / {sub(/^TOTAL /, ""); print}' | $python -c 'import json,sys; print(round(json.load(sys.stdin)["samples_per_s"]))'
}
cxx() {  # cxx <transport> [--via-owner] -> samples/s over both trainers
  LOADER_KEEP=1 TRAINER_ARGS="${2:-}" bash "$here/examples/xfer_dataloader.sh" "$build/examples/xfer_dataloader" "$1" 2 $batches \
    "$dir/shards" 2>/dev/null | awk '/^trainer-.*samples\/s/ {for (i = 1; i <= NF; ++i) if ($(i + 1) == "samples/s,") s += $i} END {print s + 0}'
}
echo "uptime: $(uptime)"
declare -A runs
for r in $(seq "$reps"); do
  runs[py_tcp]+="$(py engine tcp --via-owner) " runs[py_shm]+="$(py engine shm --via-owner) "
  runs[fromfile]+="$(py fromfile tcp) " runs[socket]+="$(py socket tcp) "
  runs[cxx_tcp]+="$(cxx tcp --via-owner) " runs[cxx_shm]+="$(cxx shm --via-owner) "
  runs[py_local]+="$(py engine tcp) " runs[cxx_local]+="$(cxx tcp) "
done
m() { printf '%s\n' ${runs[$1]} | median; }
echo
echo "### Data loader samples/s (2 trainers, 32 x 64 KiB random samples per batch, median of $reps)"
echo
echo "| loader | samples/s (runs) | vs numpy.fromfile | vs socket server |"
echo "|---|---|---|---|"
for k in py_tcp py_shm cxx_tcp cxx_shm py_local cxx_local fromfile socket; do
  echo "| $k | $(m $k) (${runs[$k]% }) | $(ratio "$(m $k)" "$(m fromfile)") | $(ratio "$(m $k)" "$(m socket)") |"
done

# 4 GiB: a run of 3 s at these rates reads each block at most once (fio's random map, bench-file-read's
# permutation), so a reader through the page cache (fio --direct=0, the same-host path) is not served from
# the cache by an earlier read of the same run; both start with the file out of the cache.
file=$dir/fio-4g.bin
[ -s "$file" ] || { head -c $((4 << 30)) /dev/urandom > "$file" && sync "$file"; }  # no writeback under fio
fio_mbs() {  # fio_mbs <bs> [direct=1] -> MB/s (fio invalidates the file's page cache first)
  fio --name=r --filename="$file" --direct="${2:-1}" --rw=randread --bs="$1" --iodepth=16 --ioengine=io_uring \
      --runtime="$secs" --time_based --output-format=json 2>/dev/null |
    $python -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"] / 1e6, 1))'
}
engine_mbs() {  # engine_mbs <bs bytes> <transport> [--memory] -> MB/s
  "$bin" --file "$file" --bs "$1" --iodepth 16 --seconds "$secs" --transport "$2" ${3:-} | awk '{print $2}'
}
declare -A io
for r in $(seq "$reps"); do
  for bs in 4194304 65536; do
    io[fio_$bs]+="$(fio_mbs $bs) " io[tcp_$bs]+="$(engine_mbs $bs tcp) " io[shm_$bs]+="$(engine_mbs $bs shm) "
    io[mem_$bs]+="$(engine_mbs $bs tcp --memory) " io[local_$bs]+="$(engine_mbs $bs tcp --local) "
    io[fiob_$bs]+="$(fio_mbs $bs 0) "
  done
done
mi() { printf '%s\n' ${io[$1]} | median; }
echo
echo "### Random READ at queue depth 16, MB/s (median of $reps): fio on the owner vs the engine's file segment"
echo
echo "| bs | fio --direct=1 (runs) | file segment tcp (runs) | ratio | file segment shm (runs) | ratio | memory segment tcp (runs) | fio --direct=0 (runs) | same host, read locally (runs) | ratio to fio --direct=0 |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for bs in 4194304 65536; do
  echo "| $((bs / 1024)) KiB | $(mi fio_$bs) (${io[fio_$bs]% }) | $(mi tcp_$bs) (${io[tcp_$bs]% }) | $(ratio "$(mi tcp_$bs)" "$(mi fio_$bs)") |" \
       "$(mi shm_$bs) (${io[shm_$bs]% }) | $(ratio "$(mi shm_$bs)" "$(mi fio_$bs)") | $(mi mem_$bs) (${io[mem_$bs]% }) |" \
       "$(mi fiob_$bs) (${io[fiob_$bs]% }) | $(mi local_$bs) (${io[local_$bs]% }) | $(ratio "$(mi local_$bs)" "$(mi fiob_$bs)") |"
done
echo "uptime: $(uptime)"
