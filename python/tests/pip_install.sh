#!/usr/bin/env bash
# python_pip_install: `pip install --no-build-isolation .` into a fresh `venv --system-site-packages` (no
# network), from the package this build assembled (RDMAKIT_PREBUILT_PACKAGE: setup.py copies it instead of
# running a second full CMake build), then imports it from the venv with no PYTHONPATH and moves bytes.
#   pip_install.sh <source dir> <build dir>
set -euo pipefail
source_dir=$1 build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# A copy of the tree, so the test writes nothing into the checkout (pip builds in place).
tar -C "$source_dir" --exclude='./build*' --exclude='./.git' -cf - . | tar -C "$work" --one-top-level=src -xf -
RDMAKIT_PREBUILT_PACKAGE="$build_dir/python/rdmakit" PIP_NO_INDEX=1 \
  "$work/venv/bin/pip" install --no-build-isolation --no-deps -q "$work/src"
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" - <<'PY'
import os, sys
import numpy as np
import rdmakit
where = os.path.dirname(rdmakit.__file__)
assert where.startswith(sys.prefix), f"imported {where}, not the venv's copy"
assert os.path.exists(os.path.join(where, "_rdmakit.pyi")), "type stubs missing from the wheel"
with rdmakit.Context(transport="shm") as ctx:
    array = np.arange(16, dtype=np.uint8)
    region = ctx.register(array)
    assert region.address == array.ctypes.data
print("pip install ok:", where)
PY
