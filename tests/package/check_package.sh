#!/usr/bin/env bash
# Installs the built rdmakit into a scratch prefix and builds a separate project against it twice:
# once with find_package(rdmakit) and once with pkg-config. Then runs both programs, and compiles the
# README's C++ snippets with -Wall -Wextra -Werror against the installed headers.
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" > /dev/null
cmake -S "$source_dir/consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" > /dev/null
cmake --build "$scratch/consumer" > /dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer/consumer"
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ "$source_dir/consumer/main.cpp" -o "$scratch/consumer-pkgconfig" $(pkg-config --cflags --libs rdmakit)
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/consumer-pkgconfig"
# The README's code blocks compile warning-free against the installed headers, as a user would paste them.
"$source_dir/readme_snippets.sh" "$source_dir/../../README.md" > "$scratch/readme_snippets.cpp"
# shellcheck disable=SC2046
g++ -std=c++23 -Wall -Wextra -Werror -c "$scratch/readme_snippets.cpp" -o "$scratch/readme_snippets.o" \
  $(pkg-config --cflags rdmakit) || { echo "package: the README's C++ snippets do not compile warning-free"; exit 1; }
# An installed tool starts with no LD_LIBRARY_PATH (its RPATH points at ../lib) and lists the transports.
if [ -x "$scratch/prefix/bin/rdmakit-info" ]; then
  env -u LD_LIBRARY_PATH "$scratch/prefix/bin/rdmakit-info" --config > "$scratch/info.txt"
  grep -q "timeout_ms" "$scratch/info.txt" || { echo "package: installed rdmakit-info printed no options"; exit 1; }
  # The transport registry and every layer's option table survive installation.
  grep -q "^transport tcp: " "$scratch/info.txt" || { echo "package: installed rdmakit-info lists no tcp transport"; exit 1; }
  grep -q "RDMAKIT_COLL_SLOTS" "$scratch/info.txt" || { echo "package: installed rdmakit-info lists no coll option"; exit 1; }
fi
echo "package: find_package and pkg-config both work; the README's snippets compile warning-free; the installed rdmakit-info runs"
