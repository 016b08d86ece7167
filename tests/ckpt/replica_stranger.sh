#!/usr/bin/env bash
# `rdmakit-ckpt serve` on loopback without a job secret admits only its own uid: a process of another uid
# (setpriv as nobody) running an engine with `replica` at it is refused (its proof of the per-user secret
# fails), and the server holds nothing of it; an engine of our uid then replicates as before. Needs root and
# setpriv: exits 77 (skipped) without them, but under CI=1 a missing setpriv as root is a failure.
#   tests/ckpt/replica_stranger.sh path/to/rdmakit-ckpt
set -uo pipefail
tool=$1
fail() { echo "FAIL: $*"; exit 1; }
if [ "$(id -u)" != 0 ]; then echo "skip: switching to uid 65534 needs root"; exit 77; fi
if [ ! -x /usr/bin/setpriv ]; then
  [ "${CI:-}" = 1 ] && fail "setpriv (util-linux) is missing on a CI machine"
  echo "skip: setpriv is not installed"; exit 77
fi
unset RDMAKIT_JOB_SECRET RDMAKIT_INSECURE
work=$(mktemp -d)
chmod 755 "$work"
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; wait; rm -rf "$work"' EXIT

"$tool" serve --budget 64 > "$work/serve.out" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q "^serving on" "$work/serve.out" && break; sleep 0.05; done
address=$(sed -n 's/^serving on \([^,]*\),.*/\1/p' "$work/serve.out")
[ -n "$address" ] || { cat "$work/serve.out"; fail "the server did not start"; }

mkdir "$work/stranger" && chown 65534:65534 "$work/stranger"
setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/nonexistent \
  "$tool" bench-replica "$work/stranger/run" "$address" 1 1 > "$work/stranger.out" 2>&1
code=$?
[ "$code" = 1 ] || { cat "$work/stranger.out"; fail "the stranger's engine exited with $code, expected 1"; }
grep -q "refused this process's proof\|did not prove" "$work/stranger.out" ||
  { cat "$work/stranger.out"; fail "the stranger was not refused by the proof"; }
grep -q "replica_GBps" "$work/stranger.out" && fail "the stranger replicated"
cat "$work/stranger.out"

"$tool" bench-replica "$work/mine" "$address" 1 1 > "$work/mine.out" 2>&1 ||
  { cat "$work/mine.out" "$work/serve.out"; fail "an engine of our uid could not replicate"; }
grep -q "replica_GBps" "$work/mine.out" || { cat "$work/mine.out"; fail "no replica push measured"; }
echo "OK: a stranger uid is refused by the replica server; our uid replicates"
