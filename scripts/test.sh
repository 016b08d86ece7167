#!/usr/bin/env bash
# Runs every test: the unit tests, the conformance suite over each transport, the package check and the
# example, in a normal build (build/) and under AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan/); the concurrency-heavy tests under ThreadSanitizer (build-tsan/); then the verbs
# conformance suite, the verbs unit tests and the example over verbs in the Soft-RoCE VM. Between the two,
# the libFuzzer targets (scripts/fuzz.sh, build-fuzz/).
#   scripts/test.sh            everything
#   scripts/test.sh --quick    the normal build only (no sanitizers, no VM)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
jobs=$(nproc)

# Tests that assert a bound on time (fault detection, a job's end, a timeout's length) or start more
# processes than there are cores run one at a time; the rest two at a time (2 cores: 40% less time). A
# bound that holds on an idle core is not one to share with another test on a 2-core machine.
serial_tests='^(reliability_.*|python_.*|coll_.*|ckpt_resume_mpirun_.*|conformance_fault_tcp|unit_ckpt_replica_fault_tcp'
serial_tests+='|unit_fault|unit_completion_queue|unit_net|unit_coll_.*|unit_tcp_ack|unit_core_message_channel'
serial_tests+='|unit_ckpt_lazy|unit_xfer_metadata|xfer_engine|xfer_file|xfer_bench_smoke|package)$'

run_suite() {
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" > /dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" -E "$serial_tests"
  ctest --test-dir "$dir" --output-on-failure -j 1 -R "$serial_tests"
}

echo "== [$(date -u +%T)] format (.clang-format, clang-format 16)"
scripts/format.sh --check

echo "== [$(date -u +%T)] build/ (RelWithDebInfo)"
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
RDMAKIT_TRANSPORT=tcp scripts/run-example.sh build
[ "$quick" -eq 1 ] && exit 0

echo "== [$(date -u +%T)] build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The key-guessing case makes a connection per guess (48000 in build/, 5 s; ~40 s per transport under ASan):
# the sanitizer builds look for memory errors, and a tenth of the guesses is plenty for that.
export RDMAKIT_CONFORMANCE_KEY_GUESSES=100,1000
# Likewise the repeated tests (crash rounds, world sizes 1-8): a quarter of the rounds, every crash point
# still reached (tests/support/test_support.hpp, scaled_repeats).
export RDMAKIT_TEST_REPEAT_SCALE=0.25
# The fault cases assert detection within the timeout + max(1 s, timeout / 2); the sanitizers run several
# times slower, so they get this much more (tests/reliability/fault_ops.hpp, tests/xfer/failure_test.cpp).
export RDMAKIT_TEST_FAULT_SLACK_MS=10000
# The sanitizer and fuzz builds unity-build the library (RDMAKIT_UNITY_BUILD, CMakeLists.txt): 2.5x less
# compile time. The normal build above stays one file per translation unit, so it still proves that every
# file compiles on its own.
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DRDMAKIT_SANITIZE=ON -DRDMAKIT_BUILD_EXAMPLES=ON -DRDMAKIT_UNITY_BUILD=ON
RDMAKIT_TRANSPORT=tcp scripts/run-example.sh build-asan

echo "== [$(date -u +%T)] build-tsan/ (ThreadSanitizer: the concurrency code)"
tsan_tests=(unit_fault unit_completion_queue unit_tcp_hostile unit_tcp_limits unit_tcp_ack unit_shm_transport unit_shm_process unit_coll_threads
            unit_xfer_metadata
            # The checkpoint engine: persist thread, copy pool, collectives from its background thread.
            unit_ckpt_engine unit_ckpt_group unit_ckpt_cluster unit_ckpt_replica)
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMAKIT_TSAN=ON -DRDMAKIT_UNITY_BUILD=ON > /dev/null
# The transfer engine (progress, retry and waiting threads over shared batches) is built here too.
cmake --build build-tsan -j "$jobs" --target conformance conformance_peer "${tsan_tests[@]}" unit_ckpt_lazy \
  xfer_engine_test xfer_file_test xfer_peer
# intercept_send=0: a socket send releases before the kernel reads the payload (src/core/tsan.hpp).
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp intercept_send=0 halt_on_error=1 exitcode=66"
(cd build-tsan/tests && ./conformance --gtest_filter='*/tcp:*/shm:*/fault_tcp')
for test in "${tsan_tests[@]}"; do (cd build-tsan/tests && "./$test"); done
# Lazy mode's background copy; its 64 MiB timing case measures speed, not races (~45 s under TSan): left out.
(cd build-tsan/tests && ./unit_ckpt_lazy --gtest_filter=-CkptLazy.SnapshotReturnsBeforeTheCopy)
(cd build-tsan/tests/xfer && ./xfer_engine_test)
# File segments: the owner's serving thread, the requester's link threads, submitters (a few seconds).
(cd build-tsan/tests/xfer && ./xfer_file_test)
unset TSAN_OPTIONS

echo "== [$(date -u +%T)] build-fuzz/ (libFuzzer: every decoder of outside bytes, 10^5 runs each)"
scripts/fuzz.sh 100000

if [ -x tests/softroce/verbs-conformance.sh ]; then
  echo "== [$(date -u +%T)] verbs over Soft-RoCE in a QEMU VM"
  tests/softroce/verbs-conformance.sh build
fi
echo "all tests passed [$(date -u +%T)]"
