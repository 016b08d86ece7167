#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: installs what rdmakit needs from Debian, builds into build/,
# and runs the example end to end.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

packages=(
  build-essential cmake g++ pkg-config git
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  # libcrypto: HMAC-SHA256 proofs of the job secret (bootstrap store, collective handshakes)
  libssl-dev
  # verbs transport headers (the library loads libibverbs/librdmacm at run time only)
  libibverbs-dev librdmacm-dev
  # Soft-RoCE test VM and the peers we measure against
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest qemu-system-x86 busybox-static cpio iproute2
  ucx-utils python3-matplotlib
  # collectives: the mpirun launch of the training example, and the Open MPI comparison
  openmpi-bin libopenmpi-dev
  # checkpoint engine: io_uring persist, and fio for its bench (bench/ckpt/run.sh)
  liburing-dev fio
  # fuzzing (scripts/fuzz.sh): clang 16 and its libFuzzer/sanitizer runtimes
  clang-16 libclang-rt-16-dev
  # the torch.distributed backend (python/torch): PyTorch 1.13's C++ headers and Python, pybind11, pytest
  python3-torch libtorch-dev pybind11-dev python3-dev python3-pytest
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2> /dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_if_needed apt-get update
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
RDMAKIT_TRANSPORT=tcp scripts/run-example.sh build
