"""One rank of test_coll.py: runs every collective on numpy arrays and torch tensors and checks results."""

import os
import sys

import numpy as np

import rdmakit


def check(name, got, expected):
    if not np.array_equal(np.asarray(got), np.asarray(expected)):
        sys.exit(f"rank mismatch in {name}: got {np.asarray(got)[:8]} expected {np.asarray(expected)[:8]}")


def main():
    with rdmakit.Communicator.from_environment() as comm:
        rank, size = comm.rank, comm.size
        # one host here: every rank on host 0 of 1
        assert (comm.host_rank, comm.host_count) == (0, 1), (comm.host_rank, comm.host_count)
        ranks_sum = size * (size - 1) / 2

        # allreduce in place, out of place, async; a size that spans several chunks
        data = np.full(300_000, rank, np.float32)
        assert comm.allreduce(data) is data
        check("allreduce in place", data, np.full(300_000, ranks_sum, np.float32))
        out = np.empty(1000, np.float64)
        comm.allreduce(np.full(1000, rank + 1.0), out, op="max")
        check("allreduce out of place max", out, np.full(1000, float(size)))
        work = comm.allreduce_async(np.full(64, 2, np.int64), op=rdmakit.ReduceOp.PROD)
        check("allreduce async prod", work.wait(), np.full(64, 2 ** size, np.int64))
        assert work.done()

        # broadcast, allgather, reduce_scatter, all_to_all, reduce
        root_data = np.arange(100, dtype=np.int32) if rank == 1 else np.zeros(100, np.int32)
        comm.broadcast(root_data, root=1)
        check("broadcast", root_data, np.arange(100, dtype=np.int32))
        gathered = np.empty(size * 10, np.int32)
        comm.allgather(np.full(10, rank, np.int32), gathered)
        check("allgather", gathered, np.repeat(np.arange(size, dtype=np.int32), 10))
        scattered = np.empty(10, np.float32)
        comm.reduce_scatter(np.arange(size * 10, dtype=np.float32), scattered)
        check("reduce_scatter", scattered, size * np.arange(rank * 10, rank * 10 + 10, dtype=np.float32))
        exchanged = np.empty(size * 4, np.int64)
        comm.all_to_all(np.arange(size * 4, dtype=np.int64) + 100 * rank, exchanged)
        expected = np.concatenate([np.arange(rank * 4, rank * 4 + 4) + 100 * r for r in range(size)])
        check("all_to_all", exchanged, expected)
        reduced = np.zeros(5, np.float32)
        comm.reduce(np.ones(5, np.float32), reduced, root=0)
        check("reduce", reduced, np.full(5, float(size) if rank == 0 else 0.0, np.float32))
        comm.barrier()
        comm.barrier_async().wait()

        if os.environ.get("COLL_WORKER_TORCH") == "1":
            torch_cases(comm, size)
        try:
            comm.allreduce(np.zeros(4, np.complex64))
            sys.exit("complex64 was accepted")
        except rdmakit.NotSupportedError:
            pass
        try:
            comm.allgather(np.zeros(4, np.float32), np.zeros(5, np.float32))
            sys.exit("a wrong allgather size was accepted")
        except rdmakit.InvalidArgumentError:
            pass
    print(f"rank {rank} ok")


def torch_cases(comm, size):
    """torch CPU tensors, in place and async, bfloat16 included."""
    import torch

    tensor = torch.full((4, 1000), float(comm.rank + 1))
    comm.allreduce(tensor, op="avg")
    check("torch allreduce avg", tensor.numpy(), np.full((4, 1000), (size + 1) / 2, np.float32))
    half = torch.ones(512, dtype=torch.bfloat16)
    comm.allreduce_async(half).wait()
    check("torch bf16", half.float().numpy(), np.full(512, float(size), np.float32))
    out = torch.empty(size * 3, dtype=torch.int64)
    comm.allgather(torch.full((3,), comm.rank, dtype=torch.int64), out)
    check("torch allgather", out.numpy(), np.repeat(np.arange(size), 3))


if __name__ == "__main__":
    main()
