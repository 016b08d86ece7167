#!/usr/bin/env bash
# xfer_bench_smoke: rdmakit-xfer-bench runs and checks its bytes. A 1 s tcp READ run with 2 threads (the
# summary row must say "verified yes"), then a broadcast to 1 and 2 receivers with a small size (every
# receiver's bytes compared; the tool fails otherwise and prints "broadcast: ... bytes checked").
#   bench_smoke.sh <rdmakit-xfer-bench>
set -euo pipefail
bench=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$(timeout 120 "$bench" --transport tcp --op read --threads 2 --duration 1 --segment 16M --block 64K \
      --batch 8) || fail "the tcp READ run exited with $?"
echo "$out"
grep -Eq '^\| tcp \| read \| 65536 \| 8 \| 2 \| .*\| yes \|$' <<<"$out" ||
  fail "no summary row for tcp READ, 2 threads, with verified = yes"

out=$(timeout 120 "$bench" --broadcast 1,2 --transport tcp --bcast-size 4M --chunk 1M) ||
  fail "the broadcast run exited with $?"
echo "$out"
for n in 1 2; do
  grep -Eq "^\| $n \| " <<<"$out" || fail "no broadcast row for $n receiver(s)"
done
grep -q '^broadcast: every receiver.s bytes checked' <<<"$out" || fail "the broadcast did not report its check"
echo "PASS: rdmakit-xfer-bench tcp READ x2 threads and broadcast 1,2, bytes verified"
