"""The Python examples run end to end (small sizes) and report success."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_ipc_numpy_example(transport):
    result = subprocess.run([sys.executable, str(EXAMPLES / "ipc_numpy.py"), "--transport", transport, "--size", "9M"],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bytes intact True, same array object True" in result.stdout
    assert "OK: the bytes landed in the receiver's own array" in result.stdout
