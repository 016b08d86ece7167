"""Collectives on numpy arrays and torch tensors: 2 and 3 ranks launched with torchrun-style variables."""

import os
import pathlib
import secrets
import socket
import subprocess
import sys

import pytest

WORKER = pathlib.Path(__file__).with_name("coll_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# 3 ranks: a world size that is not a power of two. Torch tensors in the 2-rank run only (importing torch
# costs seconds per process).
@pytest.mark.parametrize("ranks,with_torch", [(2, True), (3, False)])
def test_collectives(ranks, with_torch):
    if with_torch:
        pytest.importorskip("torch")
    port = free_port()
    env = dict(os.environ, WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), RDMAKIT_JOB_SECRET=secrets.token_hex(16), RDMAKIT_COLL_TIMEOUT_MS="30000",
               RDMAKIT_BOOTSTRAP_TIMEOUT_MS="30000", COLL_WORKER_TORCH="1" if with_torch else "0")
    procs = [
        subprocess.Popen([sys.executable, str(WORKER)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(ranks)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{output}"
        assert f"rank {rank} ok" in output
