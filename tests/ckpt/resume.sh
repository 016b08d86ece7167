#!/usr/bin/env bash
# Auto-resume: ckpt_resume killed with kill -9 at random moments and restarted must end with the same
# state hash as an uninterrupted run, and must really have resumed: the final run (and at least one killed
# run) prints "resumed at step N" with N > 1, and no run resumes earlier than the one before it.
#   tests/ckpt/resume.sh path/to/ckpt_resume [KILLS=6]
set -euo pipefail
bin=$1
kills=${2:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*"; exit 1; }
# The step a run's output says it resumed at, 0 for a fresh start, empty when it printed neither.
resumed_at() { awk '/^resumed at step/ {print $4; exit} /^fresh start/ {print 0; exit}' "$1"; }

expected=$("$bin" "$work/clean" | awk '/^final/ {print $2}')
[ -n "$expected" ] || fail "the uninterrupted run printed no final state"
previous=0 killed_resumed=0
for i in $(seq 1 "$kills"); do
  "$bin" "$work/killed" > "$work/out.$i" &
  pid=$!
  # Start the random delay once the run has printed its start line (it restored, or found nothing).
  for _ in $(seq 1 200); do [ -s "$work/out.$i" ] && break; sleep 0.01; done
  sleep "0.$((RANDOM % 40 + 5))"
  kill -9 "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  at=$(resumed_at "$work/out.$i")
  echo "run $i: $(head -1 "$work/out.$i"), killed"
  [ -n "$at" ] || fail "run $i printed neither 'resumed at step N' nor 'fresh start'"
  [ "$at" -ge "$previous" ] || fail "run $i resumed at step $at, before the previous run's step $previous"
  [ "$at" -gt 1 ] && killed_resumed=$((killed_resumed + 1))
  previous=$at
done
got=$("$bin" "$work/killed" | tee "$work/out.final" | awk '/^final/ {print $2}')
at=$(resumed_at "$work/out.final")
echo "final run: $(head -1 "$work/out.final")"
[ -n "$at" ] && [ "$at" -gt 1 ] || fail "the final run did not resume from a checkpoint ($(head -1 "$work/out.final"))"
[ "$at" -ge "$previous" ] || fail "the final run resumed at step $at, before the previous run's step $previous"
[ "$killed_resumed" -ge 1 ] || fail "none of the $kills killed runs resumed from a checkpoint"
if [ "$got" != "$expected" ]; then
  fail "state after kills and restarts $got, uninterrupted $expected"
fi
echo "OK: $kills kills ($killed_resumed killed runs resumed), final run resumed at step $at," \
  "state identical to the uninterrupted run ($expected)"
