#!/usr/bin/env bash
# `pip install --no-build-isolation .` into a fresh `/usr/bin/python3 -m venv --system-site-packages` (no
# network), then imports the package from the venv with no PYTHONPATH, checks that its extensions load from the
# venv (and link the venv's librdmakit copy through RPATH $ORIGIN), and moves bytes.
#   pip_install.sh prebuilt|full <source dir> <build dir> [torch]
# prebuilt (python_pip_install): setup.py copies the package this build assembled (RDMAKIT_PREBUILT_PACKAGE).
# full (python_pip_install_full): setup.py runs its own CMake build of the package's targets, as a user's pip
#   install does (minutes).
# torch: the build has the torch.distributed backend, so the installed package must have it too.
set -euo pipefail
mode=$1 source_dir=$2 build_dir=$3 torch=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# A copy of the tree, so the test writes nothing into the checkout (pip builds in place). Not tar's
# --one-top-level=src: it merges the tree's own src/ into the top level.
mkdir "$work/src"
tar -C "$source_dir" --exclude='./build*' --exclude='./.git' --exclude='*.egg-info' -cf - . |
  tar -C "$work/src" -xf -
[ -f "$work/src/src/core/context.cpp" ] || { echo "pip_install.sh: the copy of the tree lacks src/" >&2; exit 1; }
case $mode in
  prebuilt) export RDMAKIT_PREBUILT_PACKAGE="$build_dir/python/rdmakit" ;;
  # Optimization does not change what is packaged: -O0 compiles faster than -O3 (CMake's Release), and this build
  # was a third of the normal test stage's time in CI.
  full) unset RDMAKIT_PREBUILT_PACKAGE; export RDMAKIT_CMAKE_ARGS="-DCMAKE_CXX_FLAGS_RELEASE=-O0 ${RDMAKIT_CMAKE_ARGS:-}" ;;
  *) echo "pip_install.sh: the mode is prebuilt or full, not '$mode'" >&2; exit 2 ;;
esac
started=$SECONDS
PIP_NO_INDEX=1 "$work/venv/bin/pip" install --no-build-isolation --no-deps -q "$work/src"
echo "pip install ($mode) took $((SECONDS - started)) s"
cd "$work"
env -u PYTHONPATH RDMAKIT_TEST_TORCH="$torch" "$work/venv/bin/python" - <<'PY'
import os, subprocess, sys
import numpy as np
import rdmakit
where = os.path.dirname(rdmakit.__file__)
assert where.startswith(sys.prefix), f"imported {where}, not the venv's copy"
assert os.path.exists(os.path.join(where, "_rdmakit.pyi")), "type stubs missing from the wheel"
extensions = [rdmakit._rdmakit.__file__]
if os.environ["RDMAKIT_TEST_TORCH"]:
    import rdmakit.distributed
    import rdmakit._rdmakit_torch as backend
    import torch.distributed as dist
    # torch 1.13 records a registered backend as Backend.<NAME> (upper case) and then accepts its name.
    assert hasattr(dist.Backend, "RDMAKIT") and dist.Backend("rdmakit") == "rdmakit", \
        "importing rdmakit.distributed registered no backend"
    extensions.append(backend.__file__)
for extension in extensions:
    assert extension.startswith(sys.prefix), f"{extension} loaded from outside the venv"
    dynamic = subprocess.run(["readelf", "-d", extension], check=True, capture_output=True, text=True).stdout
    assert "[$ORIGIN]" in dynamic, f"{extension}: RUNPATH is not $ORIGIN:\n{dynamic}"
    linked = subprocess.run(["ldd", extension], check=True, capture_output=True, text=True).stdout
    library = next(line for line in linked.splitlines() if "librdmakit.so" in line)
    assert os.path.join(where, "librdmakit.so") in library, f"{extension} links {library.strip()}"
with rdmakit.Context(transport="shm") as ctx:
    array = np.arange(16, dtype=np.uint8)
    region = ctx.register(array)
    assert region.address == array.ctypes.data
print("pip install ok:", where, "extensions:", [os.path.basename(e) for e in extensions])
PY
