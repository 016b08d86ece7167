#!/usr/bin/env bash
# File segments and a process of another uid (setpriv as nobody), without a job secret: the storage node of
# the data loader example publishes its shards with its metadata in a real redis-server, which anyone on the
# host can read (redis has no users). The stranger's trainer finds the records there, but they are sealed
# with our per-user secret, which it cannot read: it opens no segment and reads no sample, and exits 1
# naming why. A trainer of our uid then reads every sample, checked, so the stranger failed for its uid
# alone. With the builtin store the stranger cannot even connect (MetadataServer.AnotherUidCannotUseThe-
# BuiltinStore); the owner's file connections refuse a peer without the secret (XferFileTrust.*). Then a
# job member of another uid (with the job secret) whose uid may not open the shards: it reads none of them
# itself (a requester on the owner's host opens the file with its own rights) and gets every sample from the
# storage node.
# Needs root and setpriv: exits 77 (skipped) without them, but under CI=1 a missing setpriv is a failure.
#   tests/xfer/file_stranger.sh <xfer_metadata_server> <xfer_dataloader>
set -uo pipefail
server_bin=$1 loader=$2
fail() { echo "FAIL: $*"; exit 1; }
if [ "$(id -u)" != 0 ]; then echo "skip: switching to uid 65534 needs root"; exit 77; fi
if [ ! -x /usr/bin/setpriv ]; then
  [ "${CI:-}" = 1 ] && fail "setpriv (util-linux) is missing on a CI machine"
  echo "skip: setpriv is not installed"; exit 77
fi
unset RDMAKIT_JOB_SECRET RDMAKIT_INSECURE
work=$(mktemp -d)
chmod 755 "$work"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait; rm -rf "$work"' EXIT

coproc SERVER { exec "$server_bin" redis; }
pids+=("$SERVER_PID")
read -t 60 -u "${SERVER[0]}" url && [ -n "$url" ] || fail "the redis metadata server did not start"

# start_storage <name>: a storage node publishing $work/<name>, its "ready" line read on fd 3.
start_storage() {
  mkfifo "$work/$1.ready"
  "$loader" storage --dir "$work/$1" --transport tcp --trainers 1 --shards 2 --samples 16 --sample-kib 16 \
    --metadata "$url" > "$work/$1.ready" 2> "$work/$1.err" &
  pids+=($!)
  exec 3< "$work/$1.ready"
  read -t 30 -u 3 word _ && [ "$word" = ready ] || { cat "$work/$1.err"; fail "the storage node of $1 did not start"; }
}
start_storage shards

setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/nonexistent \
  "$loader" trainer --metadata "$url" --transport tcp --rank 0 --batches 2 > "$work/stranger.out" 2>&1
code=$?
cat "$work/stranger.out"
[ "$code" = 1 ] || fail "the stranger's trainer exited with $code, expected 1"
grep -q "samples/s" "$work/stranger.out" && fail "the stranger read samples"
grep -qi "seal\|secret\|proof" "$work/stranger.out" || fail "the stranger's error does not say it lacks the secret"

"$loader" trainer --metadata "$url" --transport tcp --rank 0 --batches 2 > "$work/mine.out" 2>&1 ||
  { cat "$work/mine.out" "$work/shards.err"; fail "a trainer of our uid failed"; }
grep -q "samples/s" "$work/mine.out" || { cat "$work/mine.out"; fail "our trainer read no sample"; }
grep -q "file requests: 0 by the owner, [1-9][0-9]* read locally" "$work/mine.out" ||
  { cat "$work/mine.out"; fail "our trainer, on the storage node's host, did not read the shards itself"; }

# A job member of another uid (it has the job secret, so it opens the records and the owner serves it) whose
# uid may not read the shards: it never reads them itself (it opens them with its own rights), every sample
# comes through the storage node, checked.
# The first storage node ends by itself once our trainer reported (killed, it would leave its records).
first=${pids[-1]}
for _ in $(seq 300); do kill -0 "$first" 2>/dev/null || break; sleep 0.1; done
kill -0 "$first" 2>/dev/null && fail "the first storage node did not end after its trainer reported"
exec 3<&-
export RDMAKIT_JOB_SECRET="a job secret of 16+ characters"
start_storage shards2
chmod 700 "$work/shards2"
setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/nonexistent \
  "$loader" trainer --metadata "$url" --transport tcp --rank 0 --batches 2 > "$work/member.out" 2>&1 ||
  { cat "$work/member.out" "$work/shards2.err"; fail "a job member of another uid could not read through the owner"; }
cat "$work/member.out"
grep -q "samples/s, 0 bad" "$work/member.out" || fail "the member's samples were not all good"
grep -q "file requests: [1-9][0-9]* by the owner, 0 read locally" "$work/member.out" ||
  fail "the member of another uid read shards it may not open, or the owner did not serve it"
echo "OK: a stranger uid opened no file segment and read no sample; our uid read every sample, checked, from"
echo "    the shards themselves; a job member of another uid that may not open the shards got every one from the owner"
