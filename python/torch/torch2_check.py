"""One rank of check_torch2.sh's last step (torch 2.x only): the backend registered as ``cpu:rdmakit`` serves
the calls torch 2.x makes, and a DDP and an FSDP (``fully_shard`` on CPU) training step give gloo's parameters.

    python3 -m torch.distributed.run --nproc_per_node=2 python/torch/torch2_check.py

Prints "rank R: all checks passed"; any difference raises (non-zero exit).
"""

from datetime import timedelta

import torch
import torch.distributed as dist

import rdmakit.distributed  # noqa: F401  registers "rdmakit" for cpu and cuda


def check_operations(rank, world):
    t = torch.arange(10, dtype=torch.float32) + rank
    work = dist.all_reduce(t, async_op=True)
    value = work.get_future().wait()  # DDP's default hook takes value()[0]
    assert isinstance(value, list) and torch.equal(value[0], t), value
    expected = torch.arange(10, dtype=torch.float32) * world + sum(range(world))
    assert torch.equal(t, expected), t
    out = torch.empty(world * 4)
    dist.all_gather_into_tensor(out, torch.full((4,), float(rank)))  # _allgather_base
    assert torch.equal(out, torch.arange(world, dtype=torch.float32).repeat_interleave(4)), out
    full = torch.arange(world * 3, dtype=torch.float32)
    part = torch.empty(3)
    dist.reduce_scatter_tensor(part, full)  # _reduce_scatter_base
    assert torch.equal(part, full[rank * 3:(rank + 1) * 3] * world), part
    dist.barrier()
    if rank == 0:
        dist.send(torch.full((5,), 7.0), dst=1)
    elif rank == 1:
        got = torch.zeros(5)
        dist.recv(got, src=0)
        assert torch.equal(got, torch.full((5,), 7.0)), got


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def batches(rank):
    generator = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(16, 8, generator=generator), torch.randn(16, 4, generator=generator)) for _ in range(3)]


def train(wrapped, rank):
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    for x, y in batches(rank):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(wrapped(x), y).backward()
        optimizer.step()


def ddp_parameters(group, rank):
    net = model()
    train(torch.nn.parallel.DistributedDataParallel(net, process_group=group), rank)
    return [p.detach().clone() for p in net.parameters()]


def fsdp_parameters(group, rank):
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # before torch 2.6
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import DeviceMesh

    net = model()
    mesh = DeviceMesh.from_group(group, device_type="cpu")
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    train(net, rank)
    return [p.full_tensor().detach().clone() for p in net.parameters()]


def main():
    dist.init_process_group("cpu:rdmakit", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    check_operations(rank, world)
    print(f"rank {rank}: operations as expected", flush=True)
    ours = dist.new_group(backend="cpu:rdmakit")
    gloo = dist.new_group(backend="gloo")
    for name, run in (("DDP", ddp_parameters), ("FSDP", fsdp_parameters)):
        theirs, mine = run(gloo, rank), run(ours, rank)
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        print(f"rank {rank}: {name} step matches gloo's", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: all checks passed", flush=True)


if __name__ == "__main__":
    main()
