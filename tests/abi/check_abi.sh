#!/usr/bin/env bash
# The exported ABI of librdmakit.so against its record in abi/ (docs/abi.md):
#   abi/librdmakit.symbols  every exported dynamic symbol (mangled, with its version), sorted
#   abi/librdmakit.layout   size and alignment of every public struct users hold by value (layout_probe)
# Each file starts with "soversion N", the SOVERSION it describes.
#   check_abi.sh <librdmakit.so> <layout probe> <SOVERSION> <source dir>           checks (the abi_symbols test)
#   check_abi.sh <librdmakit.so> <layout probe> <SOVERSION> <source dir> --update  rewrites the record
#                                                                                    (scripts/abi-update.sh)
#   ... --update-unreleased: rewrites it even with removals (a SOVERSION not yet released)
# Fails on an exported symbol that is not listed (new API is listed by the update; an internal one lacks
# hidden visibility), and on a listed symbol that is gone or a struct whose size or alignment changed while
# SOVERSION stayed: that is an ABI break, which bumps RDMAKIT_SOVERSION (CMakeLists.txt). The update refuses
# to record a break under the same SOVERSION.
set -euo pipefail
library=$1 probe=$2 soversion=$3 source_dir=$4 mode=${5:-check}
symbols_file=$source_dir/abi/librdmakit.symbols
layout_file=$source_dir/abi/librdmakit.layout
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export LC_ALL=C

# nm prints "<value> <type> <name>@@<version>" (binutils >= 2.35 shows the version of dynamic symbols). GNU ld
# also defines the version node itself as an absolute symbol (type A) and lld does not: left out, so that the
# record holds for either linker.
nm -D --defined-only --with-symbol-versions "$library" | awk '$2 != "A" { print $NF }' | sort -u > "$scratch/symbols"
"$probe" | sort > "$scratch/layout"
[ -s "$scratch/symbols" ] || { echo "abi: nm found no exported symbol in $library"; exit 1; }
unversioned=$(grep -v '@' "$scratch/symbols" || true)
if [ -n "$unversioned" ]; then
  echo "abi: exported symbols without a version (the version script src/library/librdmakit.map.in did not apply):"
  echo "$unversioned" | head -20 | c++filt
  exit 1
fi

# A polymorphic public class (its typeinfo is exported) must export its vtable from one place: with an inline
# key function (virtual ~X() = default in the header) the vtable is a weak copy that an optimized build may
# drop and a Debug build keeps, so the exported list would depend on the build type.
without_vtable=$(sed -n 's/^_ZTI\(N7rdmakit[^@]*\)@.*/\1/p' "$scratch/symbols" | while read -r mangled; do
  grep -q "^_ZTV$mangled@" "$scratch/symbols" || echo "_ZTI$mangled"
done)
if [ -n "$without_vtable" ]; then
  echo "abi: polymorphic public classes without an exported vtable (define the virtual destructor out of line):"
  echo "$without_vtable" | c++filt | sed 's/^/abi:   /'
  exit 1
fi

# Every struct of the installed headers (namespace-scope "struct Name {") is in the probe's list.
structs=$(find "$source_dir/include/rdmakit" -name '*.hpp' -print0 | sort -z | xargs -0 awk '
  FNR == 1 { depth = 0 }
  /^namespace [a-z:]+ \{/ { stack[++depth] = $2 }
  /^\}( *\/\/.*)?$/ { if (depth > 0) depth-- }
  /^struct (RDMAKIT_API )?[A-Za-z]+ \{/ {
    ns = ""
    for (i = 1; i <= depth; i++) ns = ns (ns == "" ? "" : "::") stack[i]
    sub(/^rdmakit(::)?/, "", ns)
    name = ($2 == "RDMAKIT_API") ? $3 : $2
    print (ns == "" ? name : ns "::" name)
  }')
for struct in $structs; do
  grep -q "^$struct " "$scratch/layout" ||
    { echo "abi: public struct $struct is not in tests/abi/layout_probe.cpp: add a row for it"; exit 1; }
done

recorded_soversion() { sed -n '1s/^soversion //p' "$1" 2>/dev/null; }
body() { tail -n +2 "$1" 2>/dev/null || true; }

compare() {  # prints what is gone (recorded, not built) and what is new (built, not recorded) of one list
  local recorded=$1 built=$2
  comm -23 <(body "$recorded") "$built" > "$scratch/gone"
  comm -13 <(body "$recorded") "$built" > "$scratch/new"
}

failed=0
same_abi=1
for file in "$symbols_file" "$layout_file"; do
  [ "$(recorded_soversion "$file")" = "$soversion" ] || same_abi=0
done

compare "$symbols_file" "$scratch/symbols"
mv "$scratch/gone" "$scratch/symbols.gone"
mv "$scratch/new" "$scratch/symbols.new"
# A layout row changed is a gone row plus a new row of the same struct.
compare "$layout_file" "$scratch/layout"
mv "$scratch/gone" "$scratch/layout.gone"
mv "$scratch/new" "$scratch/layout.new"

if [ "$mode" = --update ] || [ "$mode" = --update-unreleased ]; then
  if [ "$mode" = --update ] && [ "$same_abi" = 1 ] && { [ -s "$scratch/symbols.gone" ] || [ -s "$scratch/layout.gone" ]; }; then
    echo "abi: refusing to record an ABI break under the same SOVERSION $soversion:"
    c++filt < "$scratch/symbols.gone" | sed 's/^/abi:   removed symbol: /' | head -40
    sed 's/^/abi:   old layout: /' "$scratch/layout.gone"
    echo "abi: bump RDMAKIT_SOVERSION in CMakeLists.txt (docs/abi.md), rebuild, and run scripts/abi-update.sh again"
    exit 1
  fi
  { echo "soversion $soversion"; cat "$scratch/symbols"; } > "$symbols_file"
  { echo "soversion $soversion"; cat "$scratch/layout"; } > "$layout_file"
  echo "abi: recorded $(wc -l < "$scratch/symbols") symbols and $(wc -l < "$scratch/layout") struct layouts of SOVERSION $soversion"
  echo "abi:   added: $(wc -l < "$scratch/symbols.new") symbols; removed: $(wc -l < "$scratch/symbols.gone")"
  exit 0
fi

if [ "$same_abi" = 0 ]; then
  echo "abi: abi/librdmakit.{symbols,layout} describe SOVERSION $(recorded_soversion "$symbols_file"), the"
  echo "abi: library is SOVERSION $soversion: run scripts/abi-update.sh to record the new ABI"
  failed=1
fi
if [ -s "$scratch/symbols.new" ]; then
  echo "abi: exported but not in abi/librdmakit.symbols (new public API: run scripts/abi-update.sh and commit"
  echo "abi: the list; an internal symbol: it lacks hidden visibility, or an RDMAKIT_API marker is misplaced):"
  c++filt < "$scratch/symbols.new" | sed 's/^/abi:   /' | head -40
  failed=1
fi
if [ "$same_abi" = 1 ] && [ -s "$scratch/symbols.gone" ]; then
  echo "abi: ABI break: listed symbols no longer exported while SOVERSION stayed $soversion (programs linked"
  echo "abi: against them fail to load); restore them, or bump RDMAKIT_SOVERSION (docs/abi.md):"
  c++filt < "$scratch/symbols.gone" | sed 's/^/abi:   /' | head -40
  failed=1
fi
if [ "$same_abi" = 1 ] && [ -s "$scratch/layout.gone" ]; then
  echo "abi: ABI break: public struct sizes/alignments changed while SOVERSION stayed $soversion (name size align):"
  sed 's/^/abi:   was: /' "$scratch/layout.gone"
  sed 's/^/abi:   now: /' "$scratch/layout.new"
  echo "abi: bump RDMAKIT_SOVERSION (docs/abi.md) and run scripts/abi-update.sh, or keep the layout"
  failed=1
elif [ -s "$scratch/layout.new" ]; then
  echo "abi: public structs not in abi/librdmakit.layout (new API: run scripts/abi-update.sh and commit it):"
  sed 's/^/abi:   /' "$scratch/layout.new"
  failed=1
fi
[ "$failed" = 0 ] || exit 1
echo "abi: $(wc -l < "$scratch/symbols") exported symbols and $(wc -l < "$scratch/layout") struct layouts match SOVERSION $soversion's record"
