#!/usr/bin/env bash
# Builds the rdmakit torch backend against an installed torch 2.x (a pip wheel: its headers, libraries and
# bundled pybind11; no libtorch-dev, no pybind11-dev, no network) and tests it: every operation and the
# failure scenarios of python/tests/torch_backend_worker.py, then a DDP and an FSDP (fully_shard, CPU)
# step against gloo (python/torch/torch2_check.py). Run from anywhere:
#   python/torch/check_torch2.sh                 # PYTHON=python3 by default
#   PYTHON=/opt/py312/bin/python3 python/torch/check_torch2.sh
# Needs: g++ 12+ (C++23), cmake 3.25+, OpenSSL's headers (libcrypto: the library's HMAC). Everything is built
# under $OUT_DIR (default build-torch2/ in the repository); CI (Debian, torch 1.13) does not run this.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
out=${OUT_DIR:-$root/build-torch2}
jobs=${JOBS:-$(nproc)}
step() { printf '\n== %s\n' "$*"; }
die() { printf 'check_torch2: %s\n' "$*" >&2; exit 1; }

step "torch"
read -r torch_version torch_dir abi ext_suffix py_include < <("$python" - <<'PY'
import os, sysconfig, torch
print(torch.__version__, os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI),
      sysconfig.get_config_var("EXT_SUFFIX"), sysconfig.get_paths()["include"])
PY
) || die "$python cannot import torch"
echo "torch $torch_version at $torch_dir (C++11 ABI: $abi), Python headers $py_include"
# pybind11's internals are shared with torch's only when these match torch's build (what
# torch.utils.cpp_extension passes): else the base class Backend is "an unknown base type".
mapfile -t pybind_abi < <("$python" - <<'PY'
import torch
for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{name}", None)
    if value is not None:
        print(f'-DPYBIND11_{name}="{value}"')
PY
)
case $torch_version in 1.*) die "torch $torch_version is 1.x: build with CMake instead (docs/torch.md)" ;; esac
[ -f "$py_include/Python.h" ] || die "no Python.h under $py_include (the interpreter's headers are needed)"
[ -f "$torch_dir/include/torch/csrc/distributed/c10d/Backend.hpp" ] || die "torch has no c10d headers"
command -v cmake > /dev/null || die "cmake not found"
command -v "${CXX:-g++}" > /dev/null || die "${CXX:-g++} not found"

step "librdmakit (core, tcp, shm; the ABI of torch)"
cmake -S "$root" -B "$out/lib" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMAKIT_BUILD_TESTS=OFF \
  -DRDMAKIT_BUILD_EXAMPLES=OFF -DRDMAKIT_BUILD_TOOLS=OFF -DRDMAKIT_PYTHON=OFF -DRDMAKIT_TORCH=OFF \
  -DRDMAKIT_WITH_VERBS=OFF -DRDMAKIT_WITH_CKPT=OFF -DRDMAKIT_WERROR=OFF \
  -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" > "$out.cmake.log" 2>&1 ||
  { tail -20 "$out.cmake.log"; die "configuring librdmakit failed (OpenSSL headers missing?)"; }
cmake --build "$out/lib" --target rdmakit -j"$jobs" > "$out.build.log" 2>&1 ||
  { tail -30 "$out.build.log"; die "building librdmakit failed"; }

step "the extension rdmakit._rdmakit_torch"
package="$out/python/rdmakit"
mkdir -p "$package"
: > "$package/__init__.py"  # the backend needs only distributed.py and run.py of the package
cp "$root/python/rdmakit/distributed.py" "$root/python/rdmakit/run.py" "$package/"
cp -P "$out"/lib/librdmakit.so* "$package/"
objects=()
for source in module process_group support; do
  "${CXX:-g++}" -std=c++23 -O2 -fPIC -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI="$abi" \
    -DTORCH_EXTENSION_NAME=_rdmakit_torch -DTORCH_API_INCLUDE_EXTENSION_H "${pybind_abi[@]}" \
    -I"$root/include" -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include" \
    -isystem "$py_include" -c "$root/python/torch/$source.cpp" -o "$out/$source.o" &
  objects+=("$out/$source.o")
  [ "$jobs" -gt 1 ] || wait
done
wait
"${CXX:-g++}" -shared -o "$package/_rdmakit_torch$ext_suffix" "${objects[@]}" -L"$out/lib" -lrdmakit \
  -L"$torch_dir/lib" -ltorch -ltorch_cpu -lc10 -ltorch_python -Wl,-rpath,'$ORIGIN' -Wl,-rpath,"$torch_dir/lib"
export PYTHONPATH="$out/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
"$python" -c "import rdmakit.distributed as d, rdmakit._rdmakit_torch as t; assert t.TORCH_MAJOR == 2; print('imported')"

port() { "$python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
launch() {  # launch NPROC SCRIPT ARGS...: torch's launcher on loopback
  local n=$1; shift
  "$python" -m torch.distributed.run --nproc_per_node="$n" --master_addr=127.0.0.1 --master_port="$(port)" "$@"
}
worker="$root/python/tests/torch_backend_worker.py"

step "every operation, 2 and 4 ranks"
for n in 2 4; do launch "$n" "$worker" ops 2>&1 | tee "$out/ops$n.log" | grep "checks passed"; done
step "mismatched arguments raise on both ranks"
launch 2 "$worker" mismatch 2>&1 | tee "$out/mismatch.log" | grep "checks passed"
step "a raising rank ends the job (python3 -m rdmakit.run), 4 ranks"
began=$(date +%s)
set +e
"$python" -m rdmakit.run --nproc_per_node=4 --master_addr=127.0.0.1 --master_port="$(port)" "$worker" raise \
  > "$out/raise.log" 2>&1
code=$?
set -e
took=$(($(date +%s) - began))
grep -E "peer failure seen|rdmakit.run: rank" "$out/raise.log" || true
[ "$code" -eq 1 ] || die "the launcher exited $code, not 1 (see $out/raise.log)"
[ "$took" -lt 30 ] || die "the job took $took s to end (see $out/raise.log)"
[ "$(grep -c "peer failure seen: .*rank 1 aborted" "$out/raise.log")" -eq 3 ] ||
  die "not every other rank named rank 1 (see $out/raise.log)"
grep -q "rdmakit.run: rank 1 failed (exit code 1): ValueError: boom from rank 1" "$out/raise.log" ||
  die "the launcher did not say why rank 1 failed (see $out/raise.log)"
step "DDP and FSDP (fully_shard, CPU) against gloo, 2 ranks"
launch 2 "$root/python/torch/torch2_check.py" 2>&1 | tee "$out/torch2_check.log" | grep -E "rank [0-9]+:"
[ "$(grep -c "all checks passed" "$out/torch2_check.log")" -eq 2 ] || die "see $out/torch2_check.log"
step "torch $torch_version: every check passed"
