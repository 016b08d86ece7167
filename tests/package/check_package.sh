#!/usr/bin/env bash
# Installs the built rdmakit into a scratch prefix and builds a separate project against it twice:
# once with find_package(rdmakit) and once with pkg-config; and once more with find_package against the build
# tree itself. Then runs both programs, compiles the
# README's C++ snippets and a designated initializer of every public options struct (options_defaults.cpp)
# with -Wall -Wextra -Werror against the installed headers, and runs the installed rdmakit-info.
#   check_package.sh <build dir> <tools built: ON/OFF (RDMAKIT_BUILD_TOOLS)>
# Without the tools the rdmakit-info check is left out, saying so; where CI is set (.ci/run builds
# everything) that is a failure instead, so that a broken install cannot pass.
set -euo pipefail
build_dir=$1
tools_built=${2:?usage: check_package.sh <build dir> <RDMAKIT_BUILD_TOOLS: ON/OFF>}
source_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" > /dev/null
cmake -S "$source_dir/consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" > /dev/null
cmake --build "$scratch/consumer" > /dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer/consumer"
# The build tree is a package too (export(EXPORT) in CMakeLists.txt): find_package with rdmakit_DIR=<build>;
# the program finds the build tree's library through the RPATH CMake gives it.
cmake -S "$source_dir/consumer" -B "$scratch/consumer-build-tree" -Drdmakit_DIR="$(cd "$build_dir" && pwd)" \
  > /dev/null || { echo "package: find_package(rdmakit) from the build tree failed (see above)"; exit 1; }
cmake --build "$scratch/consumer-build-tree" > /dev/null
env -u LD_LIBRARY_PATH "$scratch/consumer-build-tree/consumer"
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ "$source_dir/consumer/main.cpp" -o "$scratch/consumer-pkgconfig" $(pkg-config --cflags --libs rdmakit)
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer-pkgconfig"
# The README's code blocks compile warning-free against the installed headers, as a user would paste them.
"$source_dir/readme_snippets.sh" "$source_dir/../../README.md" > "$scratch/readme_snippets.cpp"
# shellcheck disable=SC2046
g++ -std=c++23 -Wall -Wextra -Werror -c "$scratch/readme_snippets.cpp" -o "$scratch/readme_snippets.o" \
  $(pkg-config --cflags rdmakit) || { echo "package: the README's C++ snippets do not compile warning-free"; exit 1; }

# Every field of every public options/config struct has a default initializer: a designated initializer
# naming one field compiles warning-free (-Wmissing-field-initializers, in -Wextra, flags any other field
# without one). Each such struct of the installed headers must appear in options_defaults.cpp.
include_dir="$scratch/prefix/include"
structs=$(find "$include_dir/rdmakit" -name '*.hpp' -print0 | sort -z | xargs -0 awk '
  FNR == 1 { depth = 0 }
  /^namespace [a-z:]+ \{/ { stack[++depth] = $2 }
  /^\}  \/\/ namespace/ { if (depth > 0) --depth }
  /^struct [A-Za-z]*(Options|Config) \{/ { print stack[depth] "::" $2 }')
[ "$(wc -l <<<"$structs")" -ge 10 ] ||
  { echo "package: found only $(wc -l <<<"$structs") options structs in the installed headers: the pattern broke"; exit 1; }
for struct in $structs; do
  grep -q "\b${struct}{\." "$source_dir/options_defaults.cpp" ||
    { echo "package: options_defaults.cpp has no designated initializer of $struct"; exit 1; }
done
# shellcheck disable=SC2046
g++ -std=c++23 -Wall -Wextra -Werror -c "$source_dir/options_defaults.cpp" -o "$scratch/options_defaults.o" \
  $(pkg-config --cflags rdmakit) ||
  { echo "package: a field of a public options struct has no default initializer (see above)"; exit 1; }
# An installed tool starts with no LD_LIBRARY_PATH (its RPATH points at ../lib) and lists the transports.
info_checked="the installed rdmakit-info runs"
if [ "$tools_built" = ON ]; then
  [ -x "$scratch/prefix/bin/rdmakit-info" ] ||
    { echo "package: the tools are built (RDMAKIT_BUILD_TOOLS is ON) but rdmakit-info was not installed"; exit 1; }
  env -u LD_LIBRARY_PATH "$scratch/prefix/bin/rdmakit-info" --config > "$scratch/info.txt"
  grep -q "timeout_ms" "$scratch/info.txt" || { echo "package: installed rdmakit-info printed no options"; exit 1; }
  # The transport registry and every layer's option table survive installation.
  grep -q "^transport tcp: " "$scratch/info.txt" || { echo "package: installed rdmakit-info lists no tcp transport"; exit 1; }
  grep -q "RDMAKIT_COLL_SLOTS" "$scratch/info.txt" || { echo "package: installed rdmakit-info lists no coll option"; exit 1; }
elif [ -n "${CI:-}" ]; then
  echo "package: FAILED: the tools are not built (RDMAKIT_BUILD_TOOLS is $tools_built) and CI is set, so the"
  echo "package: installed rdmakit-info cannot be checked; CI builds everything"
  exit 1
else
  info_checked="rdmakit-info NOT checked (RDMAKIT_BUILD_TOOLS is $tools_built)"
fi
echo "package: find_package (installed and build tree) and pkg-config work; the README's snippets and every"
echo "package: options struct's designated initializer compile warning-free; $info_checked"
