#!/usr/bin/env bash
# Runs the classic example pair end to end: write_read_server publishes its descriptor, write_read_client
# WRITEs, READs back and bumps a counter. Transport from RDMAKIT_TRANSPORT (default tcp).
#   scripts/run-example.sh [build-dir]
set -euo pipefail
build_dir=${1:-build}
examples="$build_dir/examples"
scratch=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2> /dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
"$examples/write_read_server" "$scratch/published" > "$scratch/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  [ -s "$scratch/published" ] && break
  sleep 0.1
done
[ -s "$scratch/published" ] || { echo "example: the server did not publish its descriptor"; cat "$scratch/server.log"; exit 1; }
"$examples/write_read_client" "$scratch/published" | tee "$scratch/client.log"
wait "$server_pid"
server_pid=
cat "$scratch/server.log"
grep -q "bytes written and read back intact" "$scratch/client.log"
grep -q "counter is 1" "$scratch/server.log"
echo "example: the client's bytes arrived intact (${RDMAKIT_TRANSPORT:-tcp})"
