#!/usr/bin/env bash
# Auto-resume: ckpt_resume killed with kill -9 at random moments and restarted must end with the same
# state hash as an uninterrupted run.   tests/ckpt/resume.sh path/to/ckpt_resume [KILLS=6]
set -euo pipefail
bin=$1
kills=${2:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

expected=$("$bin" "$work/clean" | awk '/^final/ {print $2}')
for i in $(seq 1 "$kills"); do
  "$bin" "$work/killed" > "$work/out.$i" &
  pid=$!
  sleep "0.$((RANDOM % 40 + 5))"
  kill -9 "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  echo "run $i: $(head -1 "$work/out.$i"), killed"
done
got=$("$bin" "$work/killed" | tee "$work/out.final" | awk '/^final/ {print $2}')
echo "final run: $(head -1 "$work/out.final")"
if [ "$got" != "$expected" ]; then
  echo "FAIL: state after kills and restarts $got, uninterrupted $expected"
  exit 1
fi
echo "OK: $kills kills, state identical to the uninterrupted run ($expected)"
