#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: installs what rdmakit needs from Debian, builds into build/,
# and runs the example end to end.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

packages=(
  build-essential cmake g++ pkg-config git
  # lld: links the library, tools and ~100 test programs in about half GNU ld's time (docs/abi.md, "Build
  # time"); CMake falls back to GNU ld without it
  lld
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  # libcrypto: HMAC-SHA256 proofs of the job secret (bootstrap store, collective handshakes)
  libssl-dev
  # verbs transport headers (the library loads libibverbs/librdmacm at run time only)
  libibverbs-dev librdmacm-dev
  # Soft-RoCE test VM and the peers we measure against
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest qemu-system-x86 busybox-static cpio iproute2
  ucx-utils python3-matplotlib
  # per-operation profiles in bench/RESULTS.md: system calls per operation (strace -c) and instructions per
  # operation (valgrind --tool=callgrind); valgrind's memcheck also runs the fd-exhaustion case that UBSan
  # cannot check (tests/reliability/CMakeLists.txt)
  strace valgrind
  # the test watchdog prints every thread's stack of a hung test and of its child processes
  gdb
  # collectives: the mpirun launch of the training example, and the Open MPI comparison
  openmpi-bin libopenmpi-dev
  # collectives: the srun launch of the training example on a single-node Slurm (tests/coll/slurm_train.sh)
  slurm-wlm munge
  # checkpoint engine: io_uring persist, and fio for its bench (bench/ckpt/run.sh)
  liburing-dev fio
  # checkpoint bench: torch.save / numpy.save of the same tensors (bench/ckpt/save_baseline.py)
  python3-torch python3-numpy
  # transfer engine metadata: its tests start real Redis and etcd servers (tests/xfer/metadata); our own
  # RESP and HTTP/JSON clients need no client library
  redis-server etcd-server
  # fuzzing (scripts/fuzz.sh): clang 16 and its libFuzzer/sanitizer runtimes
  clang-16 libclang-rt-16-dev
  # the format check (scripts/format.sh --check, first stage of scripts/test.sh): one pinned formatter version
  clang-format-16
  # the Python package (python/): pybind11 bindings for Debian's python3, its tests, `pip install .` into a
  # venv (setuptools + wheel drive CMake, no network), and numpy/torch, which the package and tests use
  pybind11-dev python3-dev python3-numpy python3-pytest python3-setuptools python3-wheel python3-pip
  python3-venv python3-torch
  # the torch.distributed backend (python/torch): PyTorch 1.13's C++ headers
  libtorch-dev
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2> /dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_if_needed apt-get update
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=/usr/bin/python3
cmake --build build -j "$(nproc)"
# `/usr/bin/python3 -c "import rdmakit"` works from now on, with no environment variable: a .pth file in
# Debian's site directory for locally installed packages points at the package the build assembles.
if [ -d build/python/rdmakit ]; then
  site=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("purelib", "posix_local"))' 2>/dev/null ||
         echo /usr/local/lib/python3/dist-packages)
  sudo_if_needed mkdir -p "$site"
  echo "$PWD/build/python" | sudo_if_needed tee "$site/rdmakit-build.pth" > /dev/null
  /usr/bin/python3 -c "import rdmakit"
fi
RDMAKIT_TRANSPORT=tcp scripts/run-example.sh build
