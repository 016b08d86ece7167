#!/usr/bin/env bash
# Issue #27's replica row over verbs: in the Soft-RoCE VM (tests/softroce, one rxe device, TCG: only the
# ratio means anything), the peer-memory replica push of a MiB-sized checkpoint into `rdmakit-ckpt serve`
# against `rdmakit-perf write_bw -s 4M --working-set MiB` on the same device, alternating, REPS repetitions,
# pushes 2-4 of each bench-replica run counted. Prints every measurement, then the medians and the ratio.
#   bench/ckpt/replica_verbs_vm.sh [BUILD=build] [MiB=64] [REPS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "${1:-build}" && pwd)
mib=${2:-64}
reps=${3:-3}
guest=$(mktemp /tmp/replica-verbs-guest.XXXXXX.sh)
log=$(mktemp /tmp/replica-verbs.XXXXXX.log)
trap 'rm -f "$guest" "$log"' EXIT
cat > "$guest" <<'GUEST'
#!/bin/sh
# In the VM: $1 build dir, $2 MiB, $3 repetitions.
b=$1 mib=$2 reps=$3
export RDMAKIT_TRANSPORT=verbs RDMAKIT_DEVICE=$RDMAKIT_VM_DEV0 RDMAKIT_CKPT_DIRECT_IO=no
export RDMAKIT_JOB_SECRET=replica-verbs-bench-secret
addr=$RDMAKIT_VM_ADDR0
echo "MACHINE nproc=$(nproc) kernel=$(uname -r)"
"$b/tools/rdmakit-ckpt" serve --listen "$addr:19999" --budget $((4 * mib)) > /tmp/serve.out 2>&1 &
server=$!
sleep 2
port=19100
rep=1
while [ $rep -le "$reps" ]; do
  port=$((port + 1))
  "$b/tools/rdmakit-perf" write_bw --transport verbs -d "$RDMAKIT_VM_DEV0" --listen "$addr" -p $port > /dev/null 2>&1 &
  sleep 1
  bw=$("$b/tools/rdmakit-perf" write_bw "$addr" --transport verbs -d "$RDMAKIT_VM_DEV0" -p $port -s 4M \
    --working-set "${mib}M" -n $((3 * mib / 4)) --json 2>&1 | grep -o '"bw_avg_bytes_per_s": [0-9.]*' | awk '{print $2}')
  wait $!
  echo "RESULT $rep write_bw $bw"
  rm -rf /tmp/rb
  "$b/tools/rdmakit-ckpt" bench-replica /tmp/rb "$addr:19999" "$mib" 4 2>&1 |
    sed -n 's/.*"replica_GBps": \([0-9.]*\).*/\1/p' | tail -n 3 | while read -r g; do echo "RESULT $rep replica $g"; done
  rep=$((rep + 1))
done
kill $server
GUEST
tests/softroce/run-in-vm.sh --timeout "${TIMEOUT:-1500}" --verbs-libs \
  --mem 2048 --file "$build/tools/rdmakit-ckpt" --file "$build/tools/rdmakit-perf" \
  --file "$guest" -- "$guest" "$build" "$mib" "$reps" | tee "$log"
/usr/bin/python3 - "$log" "$mib" <<'PY'
import statistics, sys
rows = {"write_bw": [], "replica": []}
for line in open(sys.argv[1], errors="replace"):
    f = line.split()
    if len(f) == 4 and f[0] == "RESULT" and f[2] in rows and f[3]:
        rows[f[2]].append(float(f[3]) / (1e9 if f[2] == "write_bw" else 1))
if rows["write_bw"] and rows["replica"]:
    w, r = statistics.median(rows["write_bw"]), statistics.median(rows["replica"])
    print(f"verbs (Soft-RoCE, TCG), {sys.argv[2]} MiB: replica push {r:.3f} GB/s (n={len(rows['replica'])}), "
          f"write_bw -s 4M --working-set {sys.argv[2]}M {w:.3f} GB/s (n={len(rows['write_bw'])}): {r / w:.2f}x")
else:
    print("no results"); sys.exit(1)
PY
