#!/usr/bin/env bash
# Auto-resume under mpirun: one rank of `mpirun -np RANKS ckpt_resume` is killed with kill -9 at a random
# moment (mpirun then ends the job), the job is restarted, KILLS times; the final run's state hash of every
# rank must equal that of an uninterrupted run. Skips (77) where Open MPI is not installed, except where CI is
# set (.ci/run installs it): there that fails.
#   tests/ckpt/resume_mpirun.sh path/to/ckpt_resume [RANKS=2] [KILLS=4]
set -uo pipefail
bin=$1
ranks=${2:-2}
kills=${3:-4}
steps=1000  # ~3 s: the kills land mid-run
skip() {
  if [ -n "${CI:-}" ]; then echo "FAILED: $* (CI is set: a missing prerequisite fails there, never skips)"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
command -v mpirun > /dev/null || skip "mpirun not installed (apt-get install openmpi-bin)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launch=(mpirun --oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np "$ranks")
[ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)

finals() { grep ' final ' "$1" | sort; }

timeout 120 "${launch[@]}" "$bin" "$work/clean" "$steps" > "$work/clean.out" 2>&1 || { cat "$work/clean.out"; exit 1; }
expected=$(finals "$work/clean.out")
[ "$(echo "$expected" | grep -c final)" = "$ranks" ] || { echo "FAIL: clean run:"; cat "$work/clean.out"; exit 1; }

for i in $(seq 1 "$kills"); do
  "${launch[@]}" "$bin" "$work/killed" "$steps" > "$work/out.$i" 2>&1 &
  mpirun_pid=$!
  sleep "0.$((RANDOM % 60 + 30))"
  # The ranks are mpirun's children: kill one of them, as a crashed process would die.
  victims=($(pgrep -P "$mpirun_pid"))
  if [ ${#victims[@]} -gt 0 ]; then
    victim=${victims[$((RANDOM % ${#victims[@]}))]}
    kill -9 "$victim" 2> /dev/null || true
  fi
  # mpirun ends the job when a rank dies; bound the wait in case it does not.
  for _ in $(seq 1 300); do kill -0 "$mpirun_pid" 2> /dev/null || break; sleep 0.1; done
  kill -9 "$mpirun_pid" 2> /dev/null || true
  wait "$mpirun_pid" 2> /dev/null
  echo "run $i: $(grep -E 'resumed|fresh' "$work/out.$i" | sort | tr '\n' ' ')killed one rank"
done
timeout 120 "${launch[@]}" "$bin" "$work/killed" "$steps" > "$work/out.final" 2>&1
echo "final run: $(grep -E 'resumed|fresh' "$work/out.final" | sort | tr '\n' ' ')"
got=$(finals "$work/out.final")
if [ "$got" != "$expected" ]; then
  echo "FAIL: state after kills and restarts differs from the uninterrupted run"
  echo "expected:"; echo "$expected"; echo "got:"; echo "$got"; cat "$work/out.final"
  exit 1
fi
echo "OK: $ranks ranks, $kills kills, every rank's state identical to the uninterrupted run"
