"""One rank of Gloo's allreduce through torch.distributed (Debian's torch 1.13, run with /usr/bin/python3),
timed as tools/rdmakit-coll-perf times rdmakit: f32 sum, out-of-place (a copy into the output first, as
torch's allreduce is in place), first run checked element by element, 2 warm-ups, clamp(2^28 / bytes, 3,
200) timed iterations, average per op, maximum over ranks; one JSON line per size on rank 0.
Environment: torchrun style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and GLOO_SOCKET_IFNAME.
    gloo_torch_allreduce.py <min bytes> <max bytes> <factor>
"""
import json
import sys
import time

import torch
import torch.distributed as dist


def main():
    low, high, factor = (int(a) for a in sys.argv[1:4])
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    size = low
    while size <= high:
        count = size // 4
        index = torch.arange(count, dtype=torch.int64)
        send = ((index + rank) % 7).to(torch.float32)
        out = send.clone()
        dist.all_reduce(out)
        want = sum(((index + r) % 7).to(torch.float32) for r in range(n))
        wrong = int((out != want).sum())
        iters = max(3, min(200, (1 << 28) // size))
        for _ in range(2):
            out.copy_(send)
            dist.all_reduce(out)
        dist.barrier()
        began = time.perf_counter()
        for _ in range(iters):
            out.copy_(send)
            dist.all_reduce(out)
        elapsed = torch.tensor([(time.perf_counter() - began) / iters * 1e6], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        us = elapsed.item()
        algbw = size / us / 1e3
        if rank == 0:
            print(json.dumps({"op": "allreduce", "ranks": n, "transports": "gloo-tcp", "algorithm": "gloo",
                              "bytes": size, "iters": iters, "time_us": round(us, 2),
                              "algbw_gbs": round(algbw, 4), "busbw_gbs": round(algbw * 2 * (n - 1) / n, 4),
                              "wrong": wrong}), flush=True)
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
