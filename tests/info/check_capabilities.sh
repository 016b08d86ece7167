#!/usr/bin/env bash
# `rdmakit-info` prints every field of rdmakit::Capabilities for each transport that opens here. The field
# names come from the header, so a field added to the struct but not to the library's listing
# (describe_capabilities() in src/core/introspection.cpp) fails here (its static_assert on the field count
# fails the library's build first; this checks the names and that rows print).
# Usage: check_capabilities.sh <rdmakit-info> <source dir>
set -euo pipefail
info=$1
header=$2/include/rdmakit/context.hpp
# Data members of `struct Capabilities { ... };`: "type name = ...;", "type name{...};" or "type name;".
fields=$(awk '/^struct Capabilities \{/ { inside = 1; next }
              inside && /^\};/ { exit }
              inside { line = $0; sub(/\/\/.*/, "", line)
                       if (line !~ /\(/ && match(line, /[a-z_0-9]+ *(=|\{|;)/)) {
                         name = substr(line, RSTART, RLENGTH); sub(/ *(=|\{|;)$/, "", name); print name } }' "$header")
count=$(wc -w <<<"$fields")
[ "$count" -ge 14 ] || { echo "check_capabilities: found only $count fields in $header: the pattern broke" >&2; exit 1; }
output=$(env -i PATH="$PATH" "$info")
# The rows of the tcp transport (always built, opens everywhere), up to the next unindented line.
tcp=$(awk '/^transport tcp: / { inside = 1; next } inside && /^[^ ]/ { exit } inside' <<<"$output")
failures=0
for field in $fields; do
  grep -qE "^  $field +[^ ]" <<<"$tcp" || { echo "check_capabilities: rdmakit-info prints no row $field for tcp" >&2;
                                             failures=$((failures + 1)); }
done
[ "$failures" -eq 0 ] || { echo "$output" >&2; exit 1; }
echo "check_capabilities: all $count fields of rdmakit::Capabilities printed for tcp"
