#!/usr/bin/env bash
# Rewrites the ABI record, abi/librdmakit.symbols and abi/librdmakit.layout, from the library and the layout
# probe built in <build dir> (default build/), after building both. Refuses to record a removed symbol or a
# changed struct layout unless RDMAKIT_SOVERSION was bumped (docs/abi.md). Commit the two files with the change
# that altered the ABI; the abi_symbols test checks the library against them.
#   scripts/abi-update.sh [--unreleased] [build dir]
# --unreleased: this SOVERSION has not shipped in a release yet (SOVERSION 1 until issue #25's parts have all
# landed), so its record may lose symbols or change layouts without a bump.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=--update
if [ "${1:-}" = --unreleased ]; then
  mode=--update-unreleased
  shift
fi
build=${1:-build}
[ -f "$build/CMakeCache.txt" ] || { echo "abi-update: $build is not a configured build directory"; exit 1; }
cmake --build "$build" --target rdmakit abi_layout_probe -j "$(nproc)" > /dev/null
soversion=$(sed -n 's/^set(RDMAKIT_SOVERSION \([0-9]*\))$/\1/p' CMakeLists.txt)
[ -n "$soversion" ] || { echo "abi-update: no set(RDMAKIT_SOVERSION N) in CMakeLists.txt"; exit 1; }
library=$(find "$build" -maxdepth 1 -name "librdmakit.so.$soversion" | head -1)
[ -n "$library" ] || { echo "abi-update: $build has no librdmakit.so.$soversion (reconfigure after a bump)"; exit 1; }
probe=$(find "$build/tests" -maxdepth 1 -name abi_layout_probe -type f | head -1)
[ -n "$probe" ] || { echo "abi-update: $build/tests/abi_layout_probe was not built (are the tests configured off?)"; exit 1; }
exec tests/abi/check_abi.sh "$library" "$probe" "$soversion" "$PWD" "$mode"
