#!/usr/bin/env bash
# `rdmakit-info --config` lists every RDMAKIT_* option the library reads, and nothing sets a variable that is
# no option. The lists come from the source, so a newly read or newly set variable that no option table
# declares fails here:
#  * every option table entry (option("name", ...) in src/) and every RDMAKIT_* name quoted in src/ must
#    appear in the output (build options RDMAKIT_WITH_* and prefixes ending in _ aside);
#  * src/ reads no RDMAKIT_* variable with getenv(), read_option_env() or a lookup of its own outside the
#    option tables (core/option_table.cpp);
#  * every RDMAKIT_* variable that tests, scripts and CI set is an option or under a reserved prefix
#    (RDMAKIT_TEST_, RDMAKIT_CONFORMANCE_, RDMAKIT_VM_, RDMAKIT_SOFTROCE_: the harnesses' own).
# Usage: check_config.sh <rdmakit-info> <source dir>
set -euo pipefail
info=$1
src=$2
# No variable of the caller's environment may change what is listed (or make --config fail).
output=$(env -i PATH="$PATH" "$info" --config)
listed=$(grep -oE '\bRDMAKIT_[A-Z0-9_]+\)' <<<"$output" | tr -d ')' | sort -u)
failures=0
complain() { echo "check_config: $*" >&2; failures=$((failures + 1)); }

declared=$(grep -rhoE '\boption\("[a-z0-9_]+"' "$src/src" | sed -E 's/option\("([a-z0-9_]+)"/\1/' |
  tr '[:lower:]' '[:upper:]' | sed 's/^/RDMAKIT_/' | sort -u)
quoted=$(grep -rhoE '"([^"\\]|\\.)*"' "$src/src" | grep -oE 'RDMAKIT_[A-Z0-9_]+' | grep -vE '^RDMAKIT_WITH_|_$' |
  sort -u)
[ "$(wc -l <<<"$declared")" -ge 30 ] || complain "found only $(wc -l <<<"$declared") option( entries in src/: the pattern broke"
for name in $declared $quoted; do
  grep -qx "$name" <<<"$listed" || complain "$name is read by the library but not listed by rdmakit-info --config"
done

while IFS= read -r line; do
  complain "reads an RDMAKIT_* variable outside the option tables: $line"
done < <(grep -rnE 'getenv\("RDMAKIT_' "$src/src" || true)
# Nor through the tables' raw reader or a lookup of its own (env("RDMAKIT_...")): a value read so bypasses
# what is set in code, and the table that declares it is not the one reader.
while IFS= read -r line; do
  complain "reads an RDMAKIT_* variable by hand instead of through its option table: $line"
done < <(grep -rnE 'read_option_env\(|[A-Za-z_]\("RDMAKIT_[A-Z0-9_]*"\)' "$src/src" |
           grep -vE '^[^:]*/src/core/option_table\.(cpp|hpp):' || true)

reserved='^RDMAKIT_(TEST|CONFORMANCE|VM|SOFTROCE)_'
# Shell assignments and exports, and setenv / ScopedEnv pairs in C++ (options_test sets misspelt names on
# purpose, to test the warning). RDMAKIT_WITH_* are CMake options, not variables.
set_names=$( (grep -rhoE '(^|[^-A-Z_])RDMAKIT_[A-Z0-9_]+=' "$src/scripts" "$src/.ci" "$src/tests" "$src/examples" \
                 "$src/bench" --include='*.sh' --include='run' --include='*.py' 2>/dev/null || true;
              grep -rhoE '(setenv\(|\{)"RDMAKIT_[A-Z0-9_]+"' "$src/tests" "$src/examples" \
                 --exclude=options_test.cpp 2>/dev/null || true) |
  grep -oE 'RDMAKIT_[A-Z0-9_]+' | grep -v '^RDMAKIT_WITH_' | sort -u)
for name in $set_names; do
  [[ $name =~ $reserved ]] && continue
  grep -qx "$name" <<<"$listed" || complain "$name is set by a test, script or CI but is no option (reserved prefixes: $reserved)"
done

if [ "$failures" -ne 0 ]; then
  echo "check_config: $failures problem(s)" >&2
  exit 1
fi
echo "check_config: $(wc -l <<<"$listed") options listed; every one read in src/ and set by tests or scripts among them"
