#!/bin/bash
# Runs a command with a metadata server of the given backend, the server's URL appended as its last argument:
#   tests/xfer/with_metadata.sh <xfer_metadata_server binary> builtin|redis|etcd <command> [args...]
# The server (a real redis-server or etcd for those backends, on a free loopback port with its data in a
# temporary directory) is always stopped after, and the command's status is the script's.
set -u
server_bin=$1 backend=$2
shift 2
server_pid=""
stop_server() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=""; }
trap stop_server EXIT
coproc SERVER { exec "$server_bin" "$backend"; }
server_pid=$SERVER_PID
if ! read -t 60 -u "${SERVER[0]}" url || [ -z "$url" ]; then
  echo "FAIL: the $backend metadata server did not start (see its message above)"; exit 1
fi
echo "metadata: $backend server at $url"
"$@" "$url"
