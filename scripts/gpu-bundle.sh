#!/usr/bin/env bash
# Builds, on a CPU machine, a self-contained folder that checks and measures rdmakit's GPU paths on a
# machine with only an NVIDIA driver (CUDA 12 or 13), no network and nothing installed (issue #26):
#   scripts/gpu-bundle.sh [BUILD_DIR=build] [OUT=gpu-bundle]
# then copy OUT anywhere on the GPU machine and run `OUT/run.sh` (under 5 minutes; it prints one table and
# writes OUT/results/). What the folder holds:
#   bin/   the test programs of the GPU logic, rdmakit-perf, cuda_copy_bw, rdmakit-info and the fake CUDA
#          runtime the tests load (libfake_cudart.so)
#   lib/   every shared library they load that glibc does not provide (librdmakit, libcrypto, liburing, ...)
#   lib/fallback/  this machine's libstdc++ and libgcc_s, used only where the target's are older
#   cuda/  this machine's libcudart (CUDA 13); run.sh falls back to a libcudart.so.12 found on the target
#          (a CUDA toolkit, or the one torch's wheels ship) when the driver is too old for 13
# The binaries need glibc >= the build machine's (2.36 on Debian 12): run.sh says so when it is older.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${2:-$root/gpu-bundle}
jobs=${JOBS:-$(nproc)}
targets=(rdmakit rdmakit-perf rdmakit-info cuda_copy_bw fake_cudart unit_fake_cudart unit_device_memory
         unit_perf_loopback unit_ckpt_cuda conformance conformance_peer xfer_device_test)

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=/usr/bin/python3 > /dev/null
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/fallback" "$out/cuda" "$out/results"
find_built() { find "$build" -name "$1" -type f -perm -u+x | grep -v CMakeFiles | head -1; }
for program in rdmakit-perf rdmakit-info cuda_copy_bw unit_fake_cudart unit_device_memory unit_perf_loopback \
               unit_ckpt_cuda conformance conformance_peer xfer_device_test; do
  path=$(find_built "$program")
  [ -n "$path" ] || { echo "gpu-bundle: $program was not built in $build" >&2; exit 1; }
  cp "$path" "$out/bin/"
done
cp "$build/tests/libfake_cudart.so" "$out/bin/"

# The libraries the programs load, except glibc's own (the target's loader must match its libc).
glibc='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil)\.so'
for binary in "$out"/bin/*; do
  ldd "$binary" 2> /dev/null | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $glibc ]]; then continue; fi
  case "$name" in
    libstdc++.so.*|libgcc_s.so.*) cp -L "$path" "$out/lib/fallback/$name" ;;
    *) cp -L "$path" "$out/lib/$name" ;;
  esac
done
cudart=$(ls /usr/local/cuda/lib64/libcudart.so.1[0-9]* 2> /dev/null | sort -V | tail -1 || true)
if [ -n "$cudart" ]; then
  cp -L "$cudart" "$out/cuda/$(basename "$cudart" | sed -E 's/(\.so\.[0-9]+).*/\1/')"
else
  echo "gpu-bundle: no CUDA toolkit here (/usr/local/cuda): run.sh will look for a libcudart on the target" >&2
fi
cp "$root/scripts/gpu-run.sh" "$out/run.sh"
chmod +x "$out/run.sh"
glibc_needed=$(objdump -T "$out"/bin/* "$out"/lib/*.so* 2> /dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -V | tail -1)
echo "$glibc_needed" > "$out/GLIBC_NEEDED"
echo "gpu-bundle: $(du -sh "$out" | cut -f1) in $out (needs $glibc_needed); run $out/run.sh on the GPU machine"
