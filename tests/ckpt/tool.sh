#!/usr/bin/env bash
# The rdmakit-ckpt tool on a real checkpoint (made by the auto-resume example, 10 steps, 256 KiB chunks):
# list, show, export (loaded with numpy and compared with the example's state recomputed in numpy), verify
# of a good checkpoint, verify after one byte of the data file was flipped (must fail naming the file and
# the chunk), and bad arguments (a clear message and a non-zero exit).
#   tests/ckpt/tool.sh path/to/rdmakit-ckpt path/to/ckpt_resume [python3]
set -uo pipefail
tool=$1
example=$2
python=${3:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect CODE OUTFILE -- COMMAND...: runs it, stdout+stderr to OUTFILE, and checks the exit code.
expect() {
  local want=$1 out=$2; shift 3
  "$@" > "$out" 2>&1
  local got=$?
  [ "$got" = "$want" ] || { cat "$out"; fail "'$*' exited with $got, expected $want"; }
}

# 10 steps, a checkpoint every 5: ckpt-...05 and ckpt-...10, in 256 KiB chunks (9 chunks of 2 MiB + 8 B).
export RDMAKIT_CKPT_CHUNK_BYTES=262144
"$example" "$work/run" 10 5 > "$work/example.out" 2>&1 || { cat "$work/example.out"; fail "ckpt_resume"; }
newest="$work/run/ckpt-00000000000000000010"
[ -f "$newest/MANIFEST" ] || { ls -R "$work/run"; fail "no checkpoint of step 10"; }

expect 0 "$work/list.out" -- "$tool" list "$work/run"
cat "$work/list.out"
[ "$(grep -c 'ckpt-0000' "$work/list.out")" = 2 ] || fail "list: expected 2 checkpoints"
head -2 "$work/list.out" | tail -1 | grep -q "^10 .*ckpt-00000000000000000010" || fail "list: newest first"
grep -q BROKEN "$work/list.out" && fail "list: a checkpoint is reported broken"

expect 0 "$work/show.out" -- "$tool" show "$work/run"
grep -q "^step 10$" "$work/show.out" || { cat "$work/show.out"; fail "show: not the manifest of step 10"; }
for tensor in "weights f32 \[512, 512\] file 0 offset 0 size 1048576" \
  "momentum f32 \[512, 512\] file 0 offset 1048576 size 1048576" "last_step u64 \[1\] file 0 offset 2097152 size 8"; do
  grep -q "^tensor $tensor$" "$work/show.out" || { cat "$work/show.out"; fail "show: no 'tensor $tensor'"; }
done
grep -q "^9 chunks$" "$work/show.out" || { cat "$work/show.out"; fail "show: not 9 chunks of 256 KiB"; }

expect 0 "$work/verify.out" -- "$tool" verify "$newest"
grep -q "OK (step 10, 9 chunks)" "$work/verify.out" || { cat "$work/verify.out"; fail "verify: unexpected output"; }

for tensor in weights momentum last_step; do
  expect 0 "$work/export.out" -- "$tool" export "$work/run" "$tensor" "$work/$tensor.npy"
done
# The example's train_step in float32 numpy: the exported state must match it (float32 sin in C and numpy
# may differ in the last bit, so a tight tolerance rather than bit equality).
"$python" - "$work" << 'PY' || fail "export: the .npy files do not hold the example's state"
import sys
import numpy as np
work = sys.argv[1]
w, m, last = (np.load(f"{work}/{n}.npy") for n in ("weights", "momentum", "last_step"))
assert w.dtype == np.float32 and w.shape == (512, 512), (w.dtype, w.shape)
assert m.dtype == np.float32 and m.shape == (512, 512), (m.dtype, m.shape)
assert last.dtype == np.uint64 and last.tolist() == [10], (last.dtype, last)
i = np.arange(1 << 18, dtype=np.uint64)
ew = np.full(1 << 18, 0.5, dtype=np.float32)
em = np.zeros(1 << 18, dtype=np.float32)
for step in range(1, 11):
    x = ((i * 7 + step * 13) % 1000).astype(np.float32) * np.float32(0.01)
    g = np.sin(x) - np.float32(0.1) * ew
    em = np.float32(0.9) * em + g
    ew = ew + np.float32(0.01) * em
np.testing.assert_allclose(w.ravel(), ew, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(m.ravel(), em, rtol=1e-5, atol=1e-6)
assert not np.array_equal(w.ravel(), np.full(1 << 18, 0.5, dtype=np.float32)), "weights never trained"
print(f"export: weights, momentum and last_step={last[0]} match the example's state")
PY

# One byte flipped at offset 700000: chunk 2 (262144..524287 is chunk 1) of rank-00000.data.
data="$newest/rank-00000.data"
byte=$(od -An -tu1 -j 700000 -N 1 "$data" | tr -d ' ')
printf "$(printf '\\%03o' $(((byte + 1) % 256)))" | dd of="$data" bs=1 seek=700000 conv=notrunc status=none
expect 1 "$work/corrupt.out" -- "$tool" verify "$newest"
cat "$work/corrupt.out"
grep -q "checksum mismatch in rank-00000.data chunk 2 " "$work/corrupt.out" ||
  fail "verify of a corrupted checkpoint does not name the file and chunk"
# The directory form verifies the newest checkpoint, the corrupted one.
expect 1 "$work/corrupt_dir.out" -- "$tool" verify "$work/run"
grep -q "chunk 2 " "$work/corrupt_dir.out" || { cat "$work/corrupt_dir.out"; fail "verify DIR"; }
# export reads through the same checks: it must refuse, not write a corrupted tensor.
expect 1 "$work/export_bad.out" -- "$tool" export "$newest" weights "$work/bad.npy"
grep -q "checksum mismatch" "$work/export_bad.out" || { cat "$work/export_bad.out"; fail "export of a corrupted chunk"; }

# Bad arguments: usage (exit 2) or a clear error naming what is wrong (exit 1).
expect 2 "$work/bad.out" -- "$tool" frobnicate
grep -q "^usage: rdmakit-ckpt" "$work/bad.out" || fail "unknown command: no usage"
expect 2 "$work/bad.out" -- "$tool" export "$newest" weights
grep -q "^usage: rdmakit-ckpt" "$work/bad.out" || fail "missing argument: no usage"
expect 1 "$work/bad.out" -- "$tool" verify "$work/nowhere"
grep -q "nowhere" "$work/bad.out" || { cat "$work/bad.out"; fail "verify of a missing directory: no path named"; }
expect 1 "$work/bad.out" -- "$tool" export "$work/run/ckpt-00000000000000000005" no_such_tensor "$work/x.npy"
grep -q "no_such_tensor" "$work/bad.out" || { cat "$work/bad.out"; fail "export of an unknown tensor"; }
expect 2 "$work/bad.out" -- "$tool" bench "$work/b" many
grep -q "many" "$work/bad.out" || { cat "$work/bad.out"; fail "bench with a non-number size"; }
echo "OK: list, show, verify, export (numpy), a flipped byte named by verify, bad arguments refused"
