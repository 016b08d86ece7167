#!/usr/bin/env bash
# Runs every test: the unit tests, the conformance suite over each transport, the package check and the
# example, in a normal build (build/) and under AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan/); then the verbs conformance suite in the Soft-RoCE VM.
#   scripts/test.sh            everything
#   scripts/test.sh --quick    the normal build only (no sanitizers, no VM)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
jobs=$(nproc)

run_suite() {
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" > /dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j 1
}

echo "== build/ (RelWithDebInfo)"
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
RDMAKIT_TRANSPORT=tcp scripts/run-example.sh build
[ "$quick" -eq 1 ] && exit 0

echo "== build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DRDMAKIT_SANITIZE=ON -DRDMAKIT_BUILD_EXAMPLES=ON
RDMAKIT_TRANSPORT=tcp scripts/run-example.sh build-asan

if [ -x tests/softroce/verbs-conformance.sh ]; then
  echo "== verbs over Soft-RoCE in a QEMU VM"
  tests/softroce/verbs-conformance.sh build
fi
echo "all tests passed"
