"""One rank of test_ckpt.py's multi-rank case: a Checkpointer over a communicator of its own, each rank
writing into its own node-local directory; saves, then a fresh Checkpointer restores every rank's shard."""

import os
import sys

import numpy as np

import rdmakit
from rdmakit.ckpt import Checkpointer


def main():
    root = sys.argv[1]
    # The engine's own communicator, next to the application's (the documented recipe).
    with rdmakit.Communicator.from_environment() as app, \
            rdmakit.Communicator.from_environment(key_prefix="ckpt/") as comm:
        rank, size = comm.rank, comm.size
        directory = os.path.join(root, f"node{rank}")
        weights = np.full(200_000, -1, np.float32)
        state = {"w": weights, "rank": np.array([rank], np.int64)}
        with Checkpointer(directory, state, direct_io=False, communicator=comm) as ckpt:
            for step in (1, 2):
                weights[:] = step * 10 + rank
                ckpt.save(step)
                report = ckpt.wait()
                assert report["step"] == step, report
            app.allreduce(np.zeros(1, np.float32))  # the application's collectives go on beside the engine's
        # Node-local: this directory holds this rank's shard only, and the job's commit record.
        ckpt_dir = os.path.join(directory, f"ckpt-{2:020d}")
        held = sorted(name for name in os.listdir(ckpt_dir) if name.endswith(".data"))
        assert held == [f"rank-{rank:05d}.data"], held
        weights[:] = 0
        with Checkpointer(directory, state, direct_io=False, communicator=comm) as again:
            assert again.restore_latest() == 2
            assert again.restored_from == ckpt_dir, again.restored_from
        assert (weights == 20 + rank).all(), weights[:4]
        print(f"rank {rank} of {size} ok", flush=True)


if __name__ == "__main__":
    main()
