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


def test_xfer_dataloader_example():
    """Two trainer processes read random samples of shard files published by publish_directory, with
    prefetch, every sample checked against the checksum table; through the storage node, as trainers on
    other nodes do (the other runs here read the shard files themselves, on the storage node's host)."""
    result = subprocess.run([sys.executable, str(EXAMPLES / "xfer_dataloader.py"), "--transport", "tcp",
                             "--trainers", "2", "--shards", "4", "--samples", "32", "--sample-kib", "16",
                             "--batches", "10", "--via-owner"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "storage: published 5 segments (dataset/checksums.bin ... dataset/shard-003.bin)" in result.stdout
    assert "OK: 2 trainers read 640 samples of 16 KiB as numpy batches (engine over tcp), every sample checked" \
        in result.stdout


def test_xfer_dataloader_example_torch_shm():
    pytest.importorskip("torch")
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("importing torch under the preloaded ASan runtime takes ~15 s; the numpy runs cover the loader")
    result = subprocess.run([sys.executable, str(EXAMPLES / "xfer_dataloader.py"), "--transport", "shm", "--torch",
                             "--trainers", "1", "--shards", "2", "--samples", "16", "--sample-kib", "16",
                             "--batches", "5", "--batch", "8"],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: 1 trainers read 40 samples of 16 KiB as torch batches (engine over shm)" in result.stdout


def test_xfer_dataloader_example_sees_a_corrupt_sample(tmp_path):
    """The check is real: a shard changed after the table was written fails the run."""
    script = str(EXAMPLES / "xfer_dataloader.py")
    common = ["--dir", str(tmp_path), "--shards", "1", "--samples", "4", "--sample-kib", "4", "--trainers", "1",
              "--batches", "4", "--batch", "8"]
    written = subprocess.run([sys.executable, script, "--source", "fromfile", *common], capture_output=True,
                             text=True, timeout=120)
    assert written.returncode == 0, written.stdout + written.stderr
    with open(tmp_path / "shard-000.bin", "r+b") as shard:
        shard.seek(3 * 4096 + 100)
        shard.write(b"\xff")
    result = subprocess.run([sys.executable, script, "--keep", "--transport", "tcp", *common],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL: 1 trainers failed" in result.stdout
    assert "samples are wrong" in result.stderr


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
