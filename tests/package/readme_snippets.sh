#!/usr/bin/env bash
# Writes the README's C++ code blocks as one translation unit on stdout, each block the body of a function
# (its #include lines go to the top). The names the README's prose says are given come in as parameters:
# `address` (a listener's address), `remote` (the server's RemoteRegion) and `grad` (a gradient buffer).
# check_package.sh compiles the result against the installed package with -Wall -Wextra -Werror.
#   readme_snippets.sh README.md > snippets.cpp
set -euo pipefail
readme=$1
blocks=$(grep -c '^```cpp$' "$readme" || true)
[ "$blocks" -ge 2 ] || { echo "readme_snippets.sh: expected C++ blocks in $readme, found $blocks" >&2; exit 1; }
awk '
  /^```cpp$/ { n++; inside = 1; next }
  /^```/ && inside { inside = 0; next }
  inside && /^#include/ { includes = includes $0 "\n"; next }
  inside { body[n] = body[n] "  " $0 "\n" }
  END {
    printf "// Generated from the README by tests/package/readme_snippets.sh.\n%s#include <string>\n#include <vector>\n\n", includes
    for (i = 1; i <= n; i++)
      printf "[[maybe_unused]] static void readme_block_%d([[maybe_unused]] const std::string& address,\n" \
             "    [[maybe_unused]] const rdmakit::RemoteRegion& remote, [[maybe_unused]] std::vector<float>& grad) {\n%s}\n\n",
             i, body[i]
  }' "$readme"
