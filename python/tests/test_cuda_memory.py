"""CUDA device memory from Python, against the fake CUDA runtime and driver: ctx.register() and the transfer
engine take __cuda_array_interface__ objects zero-copy (Region.kind 'cuda', Region.path), bytes move device to
device over tcp (staged) and through xfer batches, every byte checked through the fake's host view; bad arrays
and DLPack-only device objects are refused naming the rule. The cases run in cuda_worker.py, a process of its
own, since the library reads where CUDA is once per process."""

import os
import pathlib
import subprocess
import sys

import pytest

WORKER = pathlib.Path(__file__).with_name("cuda_worker.py")
CASES = ["region_reports_kind_and_path", "tcp_write_and_read_device_to_device",
         "bad_cuda_arrays_are_refused_naming_the_rule", "shm_takes_device_memory_or_refuses_naming_itself",
         "xfer_kv_blocks_vram_to_vram_over_tcp"]


def fake_cudart():
    path = os.environ.get("RDMAKIT_TEST_FAKE_CUDART", "")
    if not path:
        build = os.environ.get("RDMAKIT_TEST_PYTEST_BUILD_DIR", "")
        path = os.path.join(build, "tests", "libfake_cudart.so") if build else ""
    return path


@pytest.fixture(scope="module")
def outcomes():
    path = fake_cudart()
    if not os.path.exists(path):
        pytest.skip("the fake CUDA runtime (tests/fake_cudart) is not built: " + (path or "no build dir given"))
    run = subprocess.run([sys.executable, str(WORKER), path], capture_output=True, text=True, timeout=120)
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("PASS ") or line.startswith("FAIL "):
            name = line[5:].split(":")[0]
            results[name] = line
    return results, run


@pytest.mark.parametrize("case", CASES)
def test_cuda_memory(outcomes, case):
    results, run = outcomes
    assert case in results, f"case {case} did not run (exit {run.returncode}):\n{run.stdout}\n{run.stderr}"
    if not results[case].startswith("PASS"):
        failure = run.stdout[run.stdout.index(results[case]):].split("\nPASS ")[0]
        pytest.fail(failure, pytrace=False)
