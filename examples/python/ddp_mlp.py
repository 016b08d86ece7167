"""Data-parallel training of a small MLP with DistributedDataParallel: a plain torch.distributed script.

    /usr/bin/python3 -m rdmakit.run --nproc_per_node=2 examples/python/ddp_mlp.py --backend rdmakit
    /usr/bin/python3 -m rdmakit.run --nproc_per_node=2 examples/python/ddp_mlp.py --backend gloo

rdmakit.run is torch.distributed.run (same arguments) with a fix for Debian's torch 1.13 under Python 3.11,
whose own launcher fails before starting any rank ("'NoneType' object has no attribute 'get'") unless given
``--redirects 2 --tee 2``:

    /usr/bin/python3 -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node=2 \
        examples/python/ddp_mlp.py --backend rdmakit

Only the backend name differs between the runs (and importing rdmakit.distributed, which registers it: torch
1.13 has no discovery of backend plugins). Data and initial weights come from fixed seeds, so both backends
reach the same loss. Rank 0 prints the final loss over the whole data set and the mean step time.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def synthetic_data(samples, features, outputs):
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, outputs, generator=generator)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(samples, outputs, generator=generator)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    if args.backend == "rdmakit":
        import rdmakit.distributed  # noqa: F401  registers the backend

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y = synthetic_data(samples=4096, features=32, outputs=4)
    model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 4))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.MSELoss()

    # The loss over the whole data set, on rank 0 only (the model is the same on every rank).
    with torch.no_grad():
        initial = loss_fn(model(x), y).item() if rank == 0 else 0.0
    step_times = []
    for step in range(args.steps):
        # Rank r takes the r-th slice of this step's global batch.
        start = ((step * world + rank) * args.batch) % x.shape[0]
        xb, yb = x[start:start + args.batch], y[start:start + args.batch]
        began = time.perf_counter()
        optimizer.zero_grad()
        loss_fn(ddp(xb), yb).backward()
        optimizer.step()
        step_times.append(time.perf_counter() - began)

    with torch.no_grad():
        final = loss_fn(model(x), y).item() if rank == 0 else 0.0
    timed = step_times[10:] or step_times
    if rank == 0:
        print(f"backend {args.backend} ranks {world} initial loss {initial:.10f}", flush=True)
        print(f"backend {args.backend} ranks {world} final loss {final:.10f}", flush=True)
        print(f"backend {args.backend} ranks {world} mean step time {1e3 * sum(timed) / len(timed):.3f} ms", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
