#!/bin/bash
# Runs the KV-cache example: a decode process and a prefill process, every block checked on arrival.
#   examples/xfer_kvcache.sh <xfer_kvcache binary> <transport> <layout: block|layer> [blocks] [metadata URL]
# Without a metadata URL, decode serves a builtin store and prints its URL on its "ready" line.
# KVCACHE_GPU=1: both sides' KV memory in CUDA device memory (--gpu; RDMAKIT_CUDA_RUNTIME names the runtime).
# Over verbs, DECODE_DEVICES and PREFILL_DEVICES (e.g. "rxe1,rxe0" and "rxe0,rxe1") give each side's devices.
set -u
bin=$1 transport=$2 layout=$3 blocks=${4:-16} url=${5:-}
dir=$(mktemp -d /tmp/rdmakit-kvcache-XXXXXX)
decode_pid=""
cleanup() { [ -n "$decode_pid" ] && kill "$decode_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
mkfifo "$dir/ready"
gpu=""
[ "${KVCACHE_GPU:-0}" = 1 ] && gpu=--gpu
"$bin" decode $gpu ${url:+--metadata "$url"} --transport "$transport" ${DECODE_DEVICES:+--devices "$DECODE_DEVICES"} --slots $((blocks * 4)) > "$dir/ready" &
decode_pid=$!
exec 3< "$dir/ready"
if ! read -t 30 -u 3 word served || [ "$word" != ready ] || [ -z "$served" ]; then
  echo "FAIL: decode did not start"; exit 1
fi
"$bin" prefill $gpu --metadata "$served" --transport "$transport" ${PREFILL_DEVICES:+--devices "$PREFILL_DEVICES"} --layout "$layout" --blocks "$blocks" --seed $$ || exit 1
cat <&3 &
wait "$decode_pid"; status=$?; decode_pid=""
[ $status -eq 0 ] && echo "PASS: $blocks KV blocks ($layout layout${gpu:+, VRAM -> VRAM}) over $transport, metadata $served, every block checked" || echo "FAIL: decode reported bad blocks"
exit $status
