"""One rank of the torch backend tests (launched by test_torch_backend.py through torch.distributed.run).

Every check compares an operation's result with the value computed here from the ranks' known inputs.
Prints "rank R: N checks passed" at the end; any mismatch raises (non-zero exit).
    torch_backend_worker.py ops      every operation, dtype and reduce op
    torch_backend_worker.py errors   the same, then the errors a user can cause, each an exception naming the cause
    torch_backend_worker.py mismatch two ranks call collectives with another count, dtype or op: both raise
    torch_backend_worker.py raise    rank 1 raises; every other rank's next all_reduce must raise naming it
"""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import rdmakit.distributed  # noqa: F401  registers "rdmakit"

CHECKS = 0


def expect(actual, expected, what):
    global CHECKS
    if not torch.equal(actual, expected):
        raise AssertionError(f"rank {dist.get_rank()}: {what}: got {actual.tolist()}, expected {expected.tolist()}")
    CHECKS += 1


def expect_raises(fn, words, what):
    global CHECKS
    try:
        fn()
    except RuntimeError as error:
        message = str(error)
        missing = [w for w in words if w not in message]
        if missing:
            raise AssertionError(f"{what}: the error does not name {missing}: {message}")
        CHECKS += 1
        return
    raise AssertionError(f"{what}: no error was raised")


def value(rank, n, dtype):
    # Distinct per rank and element, small enough that products stay exact in float16.
    return (torch.arange(n) % 3 + rank + 1).to(dtype)


REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8,
                 torch.int8]


def reference(op, world, n, dtype):
    # Accumulated in the dtype itself, so integer overflow wraps as the communicator's does.
    acc = value(0, n, dtype)
    for r in range(1, world):
        v = value(r, n, dtype)
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            acc = acc + v
        elif op == dist.ReduceOp.PRODUCT:
            acc = acc * v
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, v)
        else:
            acc = torch.maximum(acc, v)
    if op == dist.ReduceOp.AVG:  # integer types divide with truncation
        acc = acc / world if dtype.is_floating_point else torch.div(acc, world, rounding_mode="trunc")
    return acc.to(dtype)


def check_allreduce(rank, world):
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.AVG]
    for dtype in REDUCE_DTYPES:
        for op in ops:
            for n in (1, 7, 70000):  # one element, odd, several pipeline chunks
                t = value(rank, n, dtype)
                dist.all_reduce(t, op=op)
                expect(t, reference(op, world, n, dtype), f"all_reduce {op} {dtype} n={n}")
    # Bitwise operators over the integer types, and bool (SUM is OR, PRODUCT is AND, as in gloo and NCCL).
    bitwise = {dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
               dist.ReduceOp.BXOR: torch.bitwise_xor}
    for dtype in (torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool):
        def bits(r):
            v = (torch.arange(300) * 11 + r * 37) ^ 0x5a
            return (v % 2 == 0) if dtype == torch.bool else (v % 128).to(dtype)
        ops = dict(bitwise)
        if dtype == torch.bool:
            ops.update({dist.ReduceOp.SUM: torch.logical_or, dist.ReduceOp.MAX: torch.logical_or,
                        dist.ReduceOp.PRODUCT: torch.logical_and, dist.ReduceOp.MIN: torch.logical_and})
        for op, combine in ops.items():
            t, expected = bits(rank), bits(0)
            for r in range(1, world):
                expected = combine(expected, bits(r))
            dist.all_reduce(t, op=op)
            expect(t, expected.to(dtype), f"all_reduce {op} {dtype}")
    # Async: the Work and its future (what DDP's hooks chain on).
    t = value(rank, 1000, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    future_value = work.get_future().wait()
    work.wait()
    expect(t, reference(dist.ReduceOp.SUM, world, 1000, torch.float32), "async all_reduce")
    expect(future_value[0], t, "all_reduce future value")
    # Non-contiguous: a transposed view is reduced in place through a staging copy.
    base = value(rank, 12, torch.float32).reshape(3, 4)
    view = base.t()
    dist.all_reduce(view)
    expect(base, reference(dist.ReduceOp.SUM, world, 12, torch.float32).reshape(3, 4), "all_reduce of a transposed view")
    # Many in flight, completing in issue order.
    tensors = [value(rank, 100 + i, torch.float64) for i in range(16)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    for i, (t, w) in enumerate(zip(tensors, works)):
        w.wait()
        expect(t, reference(dist.ReduceOp.SUM, world, 100 + i, torch.float64), f"in-flight all_reduce {i}")


def check_coalesced(rank, world):
    tensors = [value(rank, n, torch.float32) for n in (3, 1, 257)]
    tensors.append(value(rank, 6, torch.float32).reshape(2, 3).t())  # non-contiguous member
    dist.all_reduce_coalesced(tensors, op=dist.ReduceOp.MAX)
    for t, n in zip(tensors[:3], (3, 1, 257)):
        expect(t, reference(dist.ReduceOp.MAX, world, n, torch.float32), f"all_reduce_coalesced n={n}")
    expect(tensors[3], reference(dist.ReduceOp.MAX, world, 6, torch.float32).reshape(2, 3).t(),
           "all_reduce_coalesced non-contiguous")


def check_broadcast_and_reduce(rank, world):
    for root in range(world):
        for dtype in (torch.float32, torch.bool, torch.complex64, torch.int16):  # bytes move whatever the dtype
            t = value(rank, 33, torch.int64).to(dtype)
            dist.broadcast(t, src=root)
            expect(t, value(root, 33, torch.int64).to(dtype), f"broadcast from {root} {dtype}")
        t = value(rank, 9, torch.int64)
        dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
        if rank == root:
            expect(t, reference(dist.ReduceOp.SUM, world, 9, torch.int64), f"reduce to {root}")


def check_gathers(rank, world):
    out = [torch.zeros(5, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(out, value(rank, 5, torch.float64))
    for r in range(world):
        expect(out[r], value(r, 5, torch.float64), f"all_gather piece {r}")
    flat = torch.zeros(world * 4, dtype=torch.int32)
    dist._all_gather_base(flat, value(rank, 4, torch.int32))
    expect(flat, torch.cat([value(r, 4, torch.int32) for r in range(world)]), "_all_gather_base")
    lists = [[torch.zeros(2), torch.zeros(3)] for _ in range(world)]
    dist.all_gather_coalesced(lists, [value(rank, 2, torch.float32), value(rank, 3, torch.float32)])
    for r in range(world):
        expect(lists[r][0], value(r, 2, torch.float32), f"all_gather_coalesced rank {r} tensor 0")
        expect(lists[r][1], value(r, 3, torch.float32), f"all_gather_coalesced rank {r} tensor 1")
    gathered = [torch.zeros(3) for _ in range(world)] if rank == 0 else None
    dist.gather(value(rank, 3, torch.float32), gathered, dst=0)
    if rank == 0:
        for r in range(world):
            expect(gathered[r], value(r, 3, torch.float32), f"gather piece {r}")
    mine = torch.zeros(4)
    pieces = [value(r, 4, torch.float32) * 10 for r in range(world)] if rank == world - 1 else None
    dist.scatter(mine, pieces, src=world - 1)
    expect(mine, value(rank, 4, torch.float32) * 10, "scatter")


def check_reduce_scatter(rank, world):
    n = 6
    inputs = [value(rank, n, torch.float32) + 100 * r for r in range(world)]
    out = torch.zeros(n)
    dist.reduce_scatter(out, inputs, op=dist.ReduceOp.SUM)
    expected = sum(value(r, n, torch.float32) + 100 * rank for r in range(world))
    expect(out, expected, "reduce_scatter")
    big = torch.cat([value(rank, n, torch.int64) * (r + 1) for r in range(world)])
    out = torch.zeros(n, dtype=torch.int64)
    dist._reduce_scatter_base(out, big, op=dist.ReduceOp.MAX)
    expected = torch.stack([value(r, n, torch.int64) * (rank + 1) for r in range(world)]).max(0).values
    expect(out, expected, "_reduce_scatter_base MAX")


def check_all_to_all(rank, world):
    # Equal split: rank r sends rows [r*100 + dst] to dst.
    send = torch.tensor([rank * 100 + dst for dst in range(world)], dtype=torch.int64).repeat_interleave(2)
    recv = torch.zeros_like(send)
    dist.all_to_all_single(recv, send)
    expect(recv, torch.tensor([src * 100 + rank for src in range(world)]).repeat_interleave(2), "all_to_all_single")
    # Uneven split: rank r sends dst+1 rows to dst, each row [r, dst, 0].
    in_splits = [dst + 1 for dst in range(world)]
    out_splits = [rank + 1] * world
    send = torch.cat([torch.tensor([[rank, dst, 0]] * (dst + 1)) for dst in range(world)]).float()
    recv = torch.zeros(sum(out_splits), 3)
    dist.all_to_all_single(recv, send, out_splits, in_splits)
    expected = torch.cat([torch.tensor([[src, rank, 0]] * (rank + 1)) for src in range(world)]).float()
    expect(recv, expected, "all_to_all_single with split sizes")
    # List form, a different size per peer.
    inputs = [torch.full((src_dst_size(rank, dst),), float(rank * 10 + dst)) for dst in range(world)]
    outputs = [torch.zeros(src_dst_size(src, rank)) for src in range(world)]
    dist.all_to_all(outputs, inputs)
    for src in range(world):
        expect(outputs[src], torch.full((src_dst_size(src, rank),), float(src * 10 + rank)), f"all_to_all from {src}")


def src_dst_size(src, dst):
    return 1 + src + 2 * dst


def check_point_to_point(rank, world):
    # A ring both ways at once, with the batched API torch's pipeline code uses.
    right, left = (rank + 1) % world, (rank - 1) % world
    from_left = torch.zeros(1000, dtype=torch.float64)
    from_right = torch.zeros(1000, dtype=torch.float64)
    ops = [dist.P2POp(dist.isend, value(rank, 1000, torch.float64), right),
           dist.P2POp(dist.isend, value(rank, 1000, torch.float64) * 2, left),
           dist.P2POp(dist.irecv, from_left, left),
           dist.P2POp(dist.irecv, from_right, right)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    expect(from_left, value(left, 1000, torch.float64), "ring recv from the left")
    expect(from_right, value(right, 1000, torch.float64) * 2, "ring recv from the right")
    # Blocking send/recv with tags, several messages in a row, into a non-contiguous tensor.
    if rank == 0:
        for i in range(3):
            dist.send(torch.full((2, 3), float(i)), dst=world - 1, tag=i)
    elif rank == world - 1:
        for i in range(3):
            target = torch.zeros(3, 2).t()
            dist.recv(target, src=0, tag=i)
            expect(target, torch.full((2, 3), float(i)), f"recv message {i}")
    dist.barrier()


def check_wait_releases_the_gil(rank, world):
    # While the main thread waits for a collective that the last rank joins late, a Python thread runs.
    import threading
    import time
    ticks, stop = [0], threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    if rank == world - 1:
        time.sleep(0.5)
    thread = threading.Thread(target=tick)
    thread.start()
    t = value(rank, 10, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    before = ticks[0]
    work.wait()
    during = ticks[0] - before
    stop.set()
    thread.join()
    expect(t, reference(dist.ReduceOp.SUM, world, 10, torch.float32), "all_reduce waited for with a thread running")
    if rank != world - 1 and during < 20:
        raise AssertionError(f"rank {rank}: a Python thread ticked only {during} times during a 0.5 s wait")


def run_ops():
    rank, world = dist.get_rank(), dist.get_world_size()
    for check in (check_allreduce, check_coalesced, check_broadcast_and_reduce, check_gathers,
                  check_reduce_scatter, check_all_to_all, check_point_to_point, check_wait_releases_the_gil):
        check(rank, world)
    # A subgroup of ranks 0 and 1 runs its own communicator next to the world's.
    group = dist.new_group([0, 1], backend="rdmakit")
    if rank < 2:
        t = value(rank, 5, torch.float32)
        dist.all_reduce(t, group=group)
        expect(t, reference(dist.ReduceOp.SUM, 2, 5, torch.float32), "all_reduce in a subgroup")
    dist.barrier()


def run_errors():
    rank, world = dist.get_rank(), dist.get_world_size()
    expect_raises(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)), ["rdmakit", "Short", "cannot be reduced"],
                  "all_reduce of int16")
    expect_raises(lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
                  ["rdmakit", "BAND, BOR and BXOR take integer or bool tensors", "Float"], "all_reduce of float with BAND")
    expect_raises(lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG),
                  ["rdmakit", "AVG of bool"], "all_reduce of bool with AVG")
    expect_raises(lambda: dist.all_reduce(torch.ones(3).to_sparse()), ["rdmakit", "dense"], "sparse all_reduce")
    expect_raises(lambda: dist._all_gather_base(torch.zeros(3), torch.zeros(2)), ["rdmakit", "elements"],
                  "_all_gather_base of the wrong size")
    # Mismatched send/recv: the receiver is told both sizes, and the next message still lines up.
    if rank == 0:
        dist.send(torch.ones(4), dst=1, tag=7)
        dist.send(torch.full((2,), 5.0), dst=1, tag=8)
    elif rank == 1:
        expect_raises(lambda: dist.recv(torch.zeros(3), src=0, tag=7), ["expected tag 7 and 12 bytes", "16 bytes"],
                      "recv of the wrong size")
        t = torch.zeros(2)
        dist.recv(t, src=0, tag=8)
        expect(t, torch.full((2,), 5.0), "recv after a mismatched one")
    dist.barrier()
    # A rank that leaves: the others' next collective fails with the communicator's cause, not a hang.
    if rank == world - 1:
        print(f"rank {rank}: {CHECKS} checks passed", flush=True)
        sys.stdout.flush()
        import os
        os._exit(0)
    expect_raises(lambda: dist.all_reduce(torch.ones(1000)), ["rdmakit allreduce failed"], "all_reduce after a rank left")


def run_mismatch():
    # Each case in a group of its own: a mismatch leaves the group's communicator failed, as any error does.
    rank = dist.get_rank()
    cases = [
        ("count", lambda: torch.ones(10 + rank), None, ["another element count", "allreduce of f32 (sum)"]),
        ("dtype", lambda: torch.ones(10, dtype=torch.float64 if rank else torch.float32), None,
         ["allreduce of f64 (sum)", "allreduce of f32 (sum)"]),
        ("op", lambda: torch.ones(10), dist.ReduceOp.MAX if rank else dist.ReduceOp.SUM,
         ["allreduce of f32 (max)", "allreduce of f32 (sum)"]),
    ]
    for name, tensor, op, words in cases:
        group = dist.new_group([0, 1], backend="rdmakit")
        t = tensor()
        # The rank that finds it names both calls; a rank told by it first says so.
        told = ["rdmakit allreduce failed", "invalid argument", "the ranks that found it name both calls"]
        try:
            expect_raises(lambda: dist.all_reduce(t, op=op or dist.ReduceOp.SUM, group=group),
                          ["rdmakit allreduce failed", "invalid argument"] + words, f"all_reduce with another {name}")
        except AssertionError as error:
            if not all(w in str(error) for w in told):
                raise
            global CHECKS
            CHECKS += 1
        # The result was not touched by the other rank's data.
        expect(t, tensor(), f"all_reduce with another {name} left the tensor")
    dist.barrier()  # the world's group is unaffected


def run_raise():
    rank = dist.get_rank()
    t = torch.ones(10)
    if rank == 1:
        dist.all_reduce(t)  # the job works
        import time
        print(f"rank 1: raising at {time.time():.3f}", flush=True)
        raise ValueError("boom from rank 1")
    try:
        # Rank 1's call can end before ours (its last chunk is sent, ours not yet read): its notice may then
        # fail this first call instead of a later one. Either is the right outcome.
        dist.all_reduce(t)
        for _ in range(100):
            dist.all_reduce(torch.ones(1000))
    except RuntimeError as error:
        print(f"rank {rank}: peer failure seen: {error}", flush=True)
        raise
    raise AssertionError(f"rank {rank}: every all_reduce succeeded without rank 1")


def main():
    scenario = sys.argv[1]
    # The failure scenarios run with torch's default 30 min timeout: ending within seconds proves the cause
    # was detected, not waited out.
    timeout = timedelta(minutes=30) if scenario in ("raise", "mismatch") else timedelta(seconds=20)
    dist.init_process_group("rdmakit", timeout=timeout)
    assert dist.get_backend() == "rdmakit", dist.get_backend()
    if scenario == "raise":
        return run_raise()
    if scenario == "mismatch":
        run_mismatch()
        print(f"rank {dist.get_rank()}: {CHECKS} checks passed", flush=True)
        return
    run_ops()  # the errors launch runs with an odd number of ranks: the ops there too
    if sys.argv[1] == "errors":
        run_errors()
    rank = dist.get_rank()
    if sys.argv[1] == "ops":
        # Closing is collective (a barrier per communicator): ranks that closed their send/recv channels in
        # different orders would wait for each other until the 20 s timeout.
        import time
        began = time.monotonic()
        dist.destroy_process_group()
        took = time.monotonic() - began
        if took > 15:
            raise AssertionError(f"rank {rank}: closing the group took {took:.1f} s")
    print(f"rank {rank}: {CHECKS} checks passed", flush=True)


if __name__ == "__main__":
    main()
