#!/usr/bin/env bash
# Applies the repository's .clang-format to every C++ file git tracks, or (--check) fails naming the files
# that differ. Pinned to clang-format 16 (Debian's clang-format-16): formatters of different versions disagree.
#   scripts/format.sh           reformat in place
#   scripts/format.sh --check   CI: list the files that need formatting, exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."
formatter=clang-format-16
command -v "$formatter" > /dev/null || { echo "format: $formatter not found (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu')
if [ "${1:-}" = "--check" ]; then
  unformatted=()
  for file in "${files[@]}"; do
    "$formatter" --dry-run --Werror "$file" > /dev/null 2>&1 || unformatted+=("$file")
  done
  if [ ${#unformatted[@]} -gt 0 ]; then
    echo "format: ${#unformatted[@]} file(s) differ from .clang-format (run scripts/format.sh):" >&2
    printf '  %s\n' "${unformatted[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format"
else
  "$formatter" -i "${files[@]}"
fi
