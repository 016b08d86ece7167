#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cpp) with clang into build-fuzz/ and runs each for a
# fixed number of executions, starting from its seed corpus (tests/fuzz/corpus/<name>/, copied so the
# repository is never written), after replaying its regressions (tests/fuzz/regressions/<name>/).
#   scripts/fuzz.sh [runs]        default 100000 runs per target
#   FUZZ_TARGETS="descriptor perf_control" scripts/fuzz.sh    only these targets
# Exit status non-zero if any target crashed, leaked or tripped a sanitizer; the input is kept in
# build-fuzz/findings/<name>/ (turn it into a regression: tests/fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100000}
build=build-fuzz
cxx=${FUZZ_CXX:-clang++-16}

cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMAKIT_FUZZ=ON \
  -DRDMAKIT_BUILD_TESTS=OFF -DRDMAKIT_BUILD_EXAMPLES=OFF -DRDMAKIT_BUILD_TOOLS=OFF -DRDMAKIT_UNITY_BUILD=ON > /dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_targets

if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a names <<< "$FUZZ_TARGETS"
else
  names=()
  for source in tests/fuzz/*_fuzz.cpp; do
    name=$(basename "$source" _fuzz.cpp)
    names+=("$name")
  done
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
work=$(mktemp -d /tmp/rdmakit-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
for name in "${names[@]}"; do
  target=$build/tests/fuzz/fuzz_$name
  [ -x "$target" ] || { echo "fuzz: $name: not built (its transport is off in this build)"; continue; }
  findings=$build/findings/$name
  mkdir -p "$work/$name" "$findings"
  [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/$name/"
  if [ -d "tests/fuzz/regressions/$name" ] && [ -n "$(ls -A "tests/fuzz/regressions/$name")" ]; then
    if ! "$target" tests/fuzz/regressions/"$name"/* > "$work/$name.replay.log" 2>&1; then
      echo "fuzz: $name: a regression input fails again:"; tail -30 "$work/$name.replay.log"; failed+=("$name"); continue
    fi
  fi
  start=$(date +%s.%N)
  if "$target" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$findings/" "$work/$name" > "$work/$name.log" 2>&1; then
    execs=$(grep -m1 'stat::number_of_executed_units' "$work/$name.log" | awk '{print $2}')
    awk -v n="$name" -v e="$execs" -v s="$start" -v t="$(date +%s.%N)" \
      'BEGIN { printf "fuzz: %-16s %9d runs in %6.1f s (%d execs/s), no crash\n", n, e, t - s, e / (t - s) }' 
  else
    echo "fuzz: $name: CRASH (input kept in $findings/):"; tail -40 "$work/$name.log"; failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#names[@]} target(s) passed ($runs runs each)"
