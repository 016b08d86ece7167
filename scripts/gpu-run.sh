#!/usr/bin/env bash
# run.sh of the folder scripts/gpu-bundle.sh builds: checks and measures rdmakit's GPU paths on a machine
# with an NVIDIA driver and nothing else installed, in under 5 minutes. Run it from anywhere:
#   ./run.sh            everything: the tests, then the benchmarks
#   SIZES="1M 64M" ./run.sh
#   RUN_WITH_FAKE=1 ./run.sh   the whole script against the fake runtime (checks the script on a CPU machine;
#                              its figures are the fake's memcpy, not a GPU's)
# 1. The test programs of the GPU logic against the fake CUDA runtime beside them (the bundle is sane).
# 2. A CUDA runtime that sees a device: the folder's libcudart, else one on this machine.
# 3. On the GPU, every byte checked: rdmakit-perf moves device memory over shm (CUDA IPC) and tcp (staged)
#    between two processes, WRITE and READ, and the same runs with host memory; cuda_copy_bw measures the
#    copies they are compared with. One table; everything in results/.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=$here/results
mkdir -p "$results"
sizes=${SIZES:-1M 16M 64M}
seconds=${SECONDS_PER_SIZE:-1}
failures=0
say() { printf '%s\n' "$*" | tee -a "$results/summary.txt"; }
: > "$results/summary.txt"

# The libraries: the folder's, and its libstdc++ only where this machine's is older than the build's.
export LD_LIBRARY_PATH=$here/lib
if ! "$here/bin/rdmakit-info" > /dev/null 2>&1; then
  export LD_LIBRARY_PATH=$here/lib:$here/lib/fallback
  if ! "$here/bin/rdmakit-info" > "$results/loader.txt" 2>&1; then
    say "run.sh: the programs do not start here (they need $(cat "$here/GLIBC_NEEDED") or newer):"
    cat "$results/loader.txt"
    exit 1
  fi
fi
unset RDMAKIT_CUDA_RUNTIME RDMAKIT_CUDA_DRIVER
say "== $(date -u +%FT%TZ) on $(hostname): $(nproc) cores"
command -v nvidia-smi > /dev/null && nvidia-smi -L 2>&1 | tee -a "$results/summary.txt"

say "== 1. GPU logic against the fake CUDA runtime"
export RDMAKIT_TEST_FAKE_CUDART=$here/bin/libfake_cudart.so
run_test() {
  local name=$1; shift
  if (cd "$here/bin" && timeout 120 "./$name" "$@" > "$results/$name.log" 2>&1); then
    say "PASS $name $*"
  else
    say "FAIL $name $* (results/$name.log)"
    failures=$((failures + 1))
  fi
}
run_test unit_fake_cudart
run_test unit_device_memory
run_test unit_ckpt_cuda
run_test unit_perf_loopback --gtest_filter='*Device*'
run_test conformance --gtest_filter='*Device*:-*verbs*'  # no RDMA device on a GPU-only machine
run_test xfer_device_test
unset RDMAKIT_TEST_FAKE_CUDART

say "== 2. A CUDA runtime that sees a device"
candidates=("$here"/cuda/libcudart.so.*)
if [ "${RUN_WITH_FAKE:-0}" = 1 ]; then
  candidates=("$here/bin/libfake_cudart.so")
  export RDMAKIT_CUDA_DRIVER=$here/bin/libfake_cudart.so
fi
[ "${RUN_WITH_FAKE:-0}" = 1 ] ||
for dir in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu; do
  candidates+=("$dir"/libcudart.so.1[0-9])
done
if [ "${RUN_WITH_FAKE:-0}" != 1 ] && command -v python3 > /dev/null; then
  while read -r found; do candidates+=("$found"); done < <(python3 - 2> /dev/null <<'PY'
import glob, site, sys
for root in site.getsitepackages() + [site.getusersitepackages()]:
    for pattern in ("nvidia/cuda_runtime/lib/libcudart.so.*", "nvidia/cu*/lib/libcudart.so.*", "torch/lib/libcudart*.so*"):
        for path in sorted(glob.glob(f"{root}/{pattern}")):
            print(path)
PY
  )
fi
runtime=
for candidate in "${candidates[@]}"; do
  [ -f "$candidate" ] || continue
  if devices=$(RDMAKIT_CUDA_RUNTIME=$candidate "$here/bin/cuda_copy_bw" --probe 2>> "$results/probe.txt"); then
    runtime=$candidate
    say "runtime $candidate: $devices device(s)"
    break
  fi
  say "runtime $candidate: unusable ($(tail -1 "$results/probe.txt"))"
done
if [ -z "$runtime" ]; then
  say "no CUDA runtime sees a device here: the GPU rows are not measured"
  say "== done: $failures failure(s)"
  exit $((failures > 0 ? 1 : 2))
fi
export RDMAKIT_CUDA_RUNTIME=$runtime

say "== 3. On the GPU: copies, then rdmakit-perf between two processes (data checked after every size)"
bytes_of() {
  local s=$1
  case $s in *K) echo $(( ${s%K} << 10 ));; *M) echo $(( ${s%M} << 20 ));; *G) echo $(( ${s%G} << 30 ));; *) echo "$s";; esac
}
size_list=$(for s in $sizes; do printf '%s,' "$(bytes_of "$s")"; done)
"$here/bin/cuda_copy_bw" --sizes "${size_list%,}" --iters 20 > "$results/cuda_copy_bw.txt" 2>&1 ||
  { say "FAIL cuda_copy_bw (results/cuda_copy_bw.txt)"; failures=$((failures + 1)); }
port=19700
perf() {  # transport test memory size -> $result: MB/s, or FAIL
  local transport=$1 test=$2 memory=$3 size=$4 flag=
  [ "$memory" = cuda ] && flag=--use-cuda
  port=$((port + 1))
  local log=$results/server-$transport-$test-$memory-$size.log
  "$here/bin/rdmakit-perf" "$test" --transport "$transport" -p "$port" $flag > "$log" 2>&1 &
  local server=$! waited=0
  until grep -q "waiting for a client" "$log" 2> /dev/null || [ $waited -ge 100 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  local line
  line=$(timeout 60 "$here/bin/rdmakit-perf" "$test" 127.0.0.1 --transport "$transport" -p "$port" -s "$size" \
           -D "$seconds" --csv $flag 2> "${log/server-/client-}" | tail -1)
  # A client that failed leaves the server waiting for it.
  sleep 0.2
  kill "$server" 2> /dev/null
  wait "$server" 2> /dev/null
  echo "$transport $test $memory $size $line" >> "$results/perf.csv"
  local verified mbs
  verified=$(echo "$line" | awk -F, '{print $NF}')
  mbs=$(echo "$line" | awk -F, '{print $8}')
  if [ "$verified" = yes ] && [ -n "$mbs" ]; then result=$mbs; else result=FAIL; fi
}
copy_gbs() { awk -v k="$1" -v b="$(bytes_of "$2")" '$1 == k && $2 == b {print $3}' "$results/cuda_copy_bw.txt"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "n/a" }'; }

say ""
say "| size | path | rdmakit GB/s | peer | peer GB/s | ratio |"
say "|---|---|---|---|---|---|"
for size in $sizes; do
  d2d=$(copy_gbs d2d "$size")
  for test in write_bw read_bw; do
    perf shm "$test" cuda "$size"
    mbs=$result
    [ "$mbs" = FAIL ] && failures=$((failures + 1))
    gbs=$(awk -v m="$mbs" 'BEGIN { if (m + 0 > 0) printf "%.2f", m / 1000; else print "FAIL" }')
    say "| $size | shm $test device->device (cuda-ipc) | $gbs | cudaMemcpy d2d, one process | $d2d | $(ratio "$gbs" "$d2d") |"
  done
  for test in write_bw read_bw; do
    perf tcp "$test" host "$size"
    host=$result
    perf tcp "$test" cuda "$size"
    device=$result
    [ "$device" = FAIL ] && failures=$((failures + 1))
    h=$(awk -v m="$host" 'BEGIN { if (m + 0 > 0) printf "%.2f", m / 1000; else print "FAIL" }')
    d=$(awk -v m="$device" 'BEGIN { if (m + 0 > 0) printf "%.2f", m / 1000; else print "FAIL" }')
    say "| $size | tcp $test device->device (staged) | $d | tcp $test host->host | $h | $(ratio "$d" "$h") |"
  done
done
say ""
say "copies (cuda_copy_bw, GB/s):"
cat "$results/cuda_copy_bw.txt" | tee -a "$results/summary.txt"
say "== done: $failures failure(s); everything is in $results"
exit $((failures > 0 ? 1 : 0))
