#!/usr/bin/env bash
# The documentation stands on its own: every relative link or path in the repository's Markdown files
# resolves inside the repository, and none points at a machine's directories (/work/..., /home/...).
#   check_doc_links.sh <source dir>
set -uo pipefail
root=$(cd "$1" && pwd)
status=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  # Markdown links [text](target) and `../...` paths in code spans, outside fenced code blocks (where
  # "](x)" is code, e.g. a C++ lambda "[](Batch& b)").
  targets=$(awk '/^[[:space:]]*```/ { fenced = !fenced; next } !fenced' "$file" |
            grep -oE '\]\([^)#[:space:]]+|`\.\./[^`[:space:]]+' | sed -E 's/^\]\(//; s/^`//')
  for target in $targets; do
    case "$target" in http://* | https://* | mailto:*) continue ;; esac
    if [[ "$target" == /* ]]; then
      echo "$file: links to the absolute path $target"; status=1; continue
    fi
    resolved=$(realpath -m "$dir/$target")
    if [[ "$resolved" != "$root"/* ]]; then echo "$file: $target leaves the repository"; status=1
    elif [[ "$target" == *'*'* ]]; then
      # A pattern such as ../plots/shm-*.png names a family of files: at least one must exist.
      compgen -G "$resolved" > /dev/null || { echo "$file: nothing matches $target"; status=1; }
    elif [ ! -e "$resolved" ]; then echo "$file: $target does not exist"; status=1; fi
  done
  if grep -nE '(^|[ `(])/(work|home|shared)/' "$file"; then echo "$file: names a directory of one machine"; status=1; fi
done < <(find "$root" -name '*.md' -not -path '*/build*' -not -path '*/.git/*')
[ "$status" = 0 ] && echo "doc links: every link stays inside the repository"
exit "$status"
