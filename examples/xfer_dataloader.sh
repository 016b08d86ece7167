#!/bin/bash
# Runs the data loader example: a storage node and TRAINERS trainer processes, every sample checked.
#   examples/xfer_dataloader.sh <xfer_dataloader binary> <transport> [trainers] [batches] [dataset dir]
# The storage node writes the shards into the dataset dir (default: a temporary one, removed after) and
# serves a builtin metadata store; each trainer reads `batches` batches of 32 random 64 KiB samples.
# LOADER_KEEP=1: the shards in the dataset dir are there already (a benchmark's later runs); LOADER_ARGS:
# more options for the storage node (e.g. "--shards 16 --samples 256"); TRAINER_ARGS: for the trainers.
set -u
bin=$1 transport=$2 trainers=${3:-3} batches=${4:-20} data=${5:-}
dir=$(mktemp -d /tmp/rdmakit-dataloader-XXXXXX)
storage_pid=""
cleanup() { [ -n "$storage_pid" ] && kill "$storage_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
mkfifo "$dir/ready"
keep=""
[ "${LOADER_KEEP:-0}" = 1 ] && keep=--keep
"$bin" storage --dir "${data:-$dir/shards}" --transport "$transport" --trainers "$trainers" $keep ${LOADER_ARGS:-} > "$dir/ready" &
storage_pid=$!
exec 3< "$dir/ready"
if ! read -t 30 -u 3 word url || [ "$word" != ready ] || [ -z "$url" ]; then
  echo "FAIL: the storage node did not start"; exit 1
fi
pids=()
for rank in $(seq 0 $((trainers - 1))); do
  "$bin" trainer --metadata "$url" --transport "$transport" --rank "$rank" --batches "$batches" ${TRAINER_ARGS:-} &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
if [ $failed -ne 0 ]; then echo "FAIL: a trainer failed"; exit 1; fi
cat <&3 &
wait "$storage_pid"; status=$?; storage_pid=""
[ $status -eq 0 ] && echo "PASS: $trainers trainers read random samples of the shards over $transport, every sample checked" || echo "FAIL: the storage node saw a bad report"
exit $status
