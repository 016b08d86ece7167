#!/usr/bin/env bash
# Issue #28's file-segment row over verbs: in the Soft-RoCE VM (one rxe device, TCG: only ratios mean
# anything), random READs of 4 MiB and 64 KiB at queue depth 16 from a file segment (bench/xfer/file_read.cpp:
# an owner process publishes a 256 MiB file, the reader keeps 16 READs in flight, every request checked)
# against the engine's memory-segment READ of the same bytes (--memory), alternating, REPS repetitions.
# The VM has no disk (its /tmp is tmpfs: the owner reads the page cache), so there is no fio/NVMe bound here.
#   bench/xfer/file-read-verbs-vm.sh [BUILD=build] [REPS=3] [SECONDS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "${1:-build}" && pwd)
reps=${2:-3}
secs=${3:-3}
bin=$build/bench-file-read
g++ -std=c++23 -O2 -Iinclude bench/xfer/file_read.cpp -L"$build" -lrdmakit -Wl,-rpath,"$build" -o "$bin"
guest=$(mktemp /tmp/file-read-verbs-guest.XXXXXX.sh)
log=$(mktemp /tmp/file-read-verbs.XXXXXX.log)
trap 'rm -f "$guest" "$log"' EXIT
cat > "$guest" <<'GUEST'
#!/bin/sh
# In the VM: $1 the file_read binary, $2 repetitions, $3 seconds per run.
bin=$1 reps=$2 secs=$3
export RDMAKIT_DEVICE=$RDMAKIT_VM_DEV0
head -c $((256 << 20)) /dev/urandom > /tmp/data.bin
rep=1
while [ $rep -le "$reps" ]; do
  for bs in 4194304 65536; do
    for kind in file memory; do
      flag=""; [ $kind = memory ] && flag=--memory
      mbs=$("$bin" --file /tmp/data.bin --bs $bs --iodepth 16 --seconds "$secs" --transport verbs $flag 2>&1 |
        awk '$1 == "MB/s" {print $2}')
      echo "RESULT $rep $bs $kind ${mbs:-none}"
    done
  done
  rep=$((rep + 1))
done
GUEST
tests/softroce/run-in-vm.sh --timeout "${TIMEOUT:-1500}" --verbs-libs --mem 2048 --file "$bin" --file "$guest" \
  -- "$guest" "$bin" "$reps" "$secs" | tee "$log"
/usr/bin/python3 - "$log" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1], errors="replace"):
    f = line.split()
    if len(f) == 5 and f[0] == "RESULT" and f[4] != "none":
        rows.setdefault((int(f[2]), f[3]), []).append(float(f[4]))
print("| READ, queue depth 16, verbs (Soft-RoCE, TCG) | file segment MB/s (runs) | memory segment MB/s (runs) | ratio |")
print("|---|---|---|---|")
for bs in (4194304, 65536):
    f, m = rows.get((bs, "file"), []), rows.get((bs, "memory"), [])
    if f and m:
        print(f"| {bs // 1024} KiB | {statistics.median(f):.1f} ({', '.join(f'{x:.1f}' for x in f)}) | "
              f"{statistics.median(m):.1f} ({', '.join(f'{x:.1f}' for x in m)}) | "
              f"{statistics.median(f) / statistics.median(m):.2f}x |")
PY
