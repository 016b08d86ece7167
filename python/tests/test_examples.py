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


def test_xfer_kvcache_example():
    result = subprocess.run([sys.executable, str(EXAMPLES / "xfer_kvcache.py"), "--transport", "tcp", "--blocks", "8",
                             "--table", "6", "--block-kib", "256", "--local", "numpy"],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 blocks of 256 KiB into a numpy array over tcp" in result.stdout
    assert "OK: every block checked on arrival, and the write back landed" in result.stdout
    assert "3 blocks evicted to NVMe (writable file segment 'kv-nvme') and read back on a hit" in result.stdout


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_xfer_kvcache_example_gpu(transport):
    """--gpu: both pools in (fake) CUDA device memory, blocks VRAM -> VRAM (shm: CUDA IPC, tcp: staged)."""
    fake = os.environ.get("RDMAKIT_TEST_FAKE_CUDART", "")
    if not fake:
        build = os.environ.get("RDMAKIT_TEST_PYTEST_BUILD_DIR", "")
        fake = os.path.join(build, "tests", "libfake_cudart.so") if build else ""
    if not os.path.exists(fake):
        pytest.skip("the fake CUDA runtime (tests/fake_cudart) is not built: " + (fake or "no build dir given"))
    env = dict(os.environ, RDMAKIT_CUDA_RUNTIME=fake, RDMAKIT_CUDA_DRIVER=fake)
    result = subprocess.run([sys.executable, str(EXAMPLES / "xfer_kvcache.py"), "--transport", transport, "--gpu",
                             "--blocks", "8", "--table", "6", "--block-kib", "256"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"6 blocks of 256 KiB into a CUDA device buffer over {transport}" in result.stdout
    assert "OK: every block checked on arrival, and the write back landed" in result.stdout


def test_ckpt_resume_example_survives_kill(tmp_path):
    script = str(EXAMPLES / "ckpt_resume.py")
    common = ["--steps", "60", "--every", "7", "--features", "512", "--print-hash"]
    killed = subprocess.run([sys.executable, script, "--dir", str(tmp_path / "run"), "--kill-at", "40", *common],
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stdout + killed.stderr  # SIGKILL: no clean shutdown
    resumed = subprocess.run([sys.executable, script, "--dir", str(tmp_path / "run"), *common],
                             capture_output=True, text=True, timeout=120)
    reference = subprocess.run([sys.executable, script, "--dir", str(tmp_path / "ref"), *common],
                               capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0 and reference.returncode == 0, resumed.stderr + reference.stderr
    # The last committed checkpoint before the kill at 40: 35, or 28 when 35 was still being persisted.
    assert "resumed after step 35" in resumed.stdout or "resumed after step 28" in resumed.stdout, resumed.stdout
    assert "fresh start" in reference.stdout
    assert resumed.stdout.split("weights ")[1] == reference.stdout.split("weights ")[1]
