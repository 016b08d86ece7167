"""The torch.distributed backend, run as users run it: python3 -m torch.distributed.run with N ranks.

Each launch runs torch_backend_worker.py, which checks every operation's result against expected values;
a test passes when every rank exits 0 and reports its checks.
"""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("torch_backend_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nproc, scenario, extra_env=None, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1", **(extra_env or {}))
    # --redirects 2 --tee 2: torch 1.13's launcher cannot parse its own default "0" under Python 3.11
    # (IntFlag iteration skips the zero member), so stderr is sent through its log tee instead.
    command = [sys.executable, "-m", "torch.distributed.run", "--redirects", "2", "--tee", "2",
               f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
               str(WORKER), scenario]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    return result.returncode, output


def passed_ranks(output):
    return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"rank (\d+): (\d+) checks passed", output)}


@pytest.mark.parametrize("nproc", [2, 4])  # 3 ranks (odd) run in the errors test
def test_every_operation_matches_expected_values(nproc):
    code, output = launch(nproc, "ops")
    assert code == 0, output
    ranks = passed_ranks(output)
    assert sorted(ranks) == list(range(nproc)), output
    assert all(count > 100 for count in ranks.values()), output


def test_errors_name_their_cause():
    # The surviving ranks' collective fails fast once the last rank is gone.
    code, output = launch(3, "errors", {"RDMAKIT_COLL_TIMEOUT_MS": "10000"})
    ranks = passed_ranks(output)
    assert sorted(ranks) == [0, 1, 2], output
    assert code == 0, output
