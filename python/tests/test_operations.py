"""Every operation over every in-process transport: bytes landed, statuses exact."""

import numpy as np
import pytest

import rdmakit
from rdmakit import Access, Opcode, Status, WorkRequest

ALL = Access.ALL


def test_write_then_read_back(ctx, peer_ctx, pair):
    client, _ = pair
    source = np.random.default_rng(1).integers(0, 255, 1 << 20, dtype=np.uint8)
    target = np.zeros_like(source)
    local = ctx.register(source)
    remote = peer_ctx.register(target)
    done = client.wait(client.write(local, remote.descriptor), timeout=10)
    assert done.ok and done.status == Status.SUCCESS and done.opcode == Opcode.WRITE
    assert np.array_equal(source, target)
    back = np.zeros_like(source)
    completion = client.wait(client.read(ctx.register(back), remote.descriptor), timeout=10)
    assert completion.opcode == Opcode.READ and completion.bytes == source.nbytes
    assert np.array_equal(back, source)


def test_scatter_gather_and_offsets(ctx, peer_ctx, pair):
    client, _ = pair
    a, b = np.full(16, 1, np.uint8), np.full(16, 2, np.uint8)
    target = np.zeros(64, np.uint8)
    remote_region = peer_ctx.register(target)
    remote = remote_region.descriptor
    client.wait(client.write([ctx.register(a), ctx.register(b)[0:8]], remote.at(8)), timeout=5)
    assert list(target[:8]) == [0] * 8 and list(target[8:24]) == [1] * 16 and list(target[24:32]) == [2] * 8
    assert not target[32:].any()


def test_write_imm_and_send_consume_receives(ctx, peer_ctx, pair):
    client, server = pair
    inbox = np.zeros(64, np.uint8)
    inbox_region = peer_ctx.register(inbox)
    recv_ids = [server.post_recv(inbox_region[0:32]), server.post_recv(inbox_region[32:64])]
    message = ctx.register(np.frombuffer(b"hello, rdmakit!!", np.uint8).copy())
    client.wait(client.write_imm(message, inbox_region.descriptor.at(0), imm=0xBEEF), timeout=5)
    first = server.wait(recv_ids[0], timeout=5)
    assert first.opcode == Opcode.RECV_WRITE_IMM and first.has_imm and first.imm == 0xBEEF and first.bytes == 16
    client.wait(client.send_imm(message[0:5], imm=7), timeout=5)
    second = server.wait(recv_ids[1], timeout=5)
    assert second.opcode == Opcode.RECV and second.imm == 7 and second.bytes == 5
    assert bytes(inbox[:16]) == b"hello, rdmakit!!" and bytes(inbox[32:37]) == b"hello"
    rid = server.post_recv(inbox_region)
    client.wait(client.send(message), timeout=5)
    plain = server.wait(rid, timeout=5)
    assert plain.opcode == Opcode.RECV and not plain.has_imm and plain.bytes == 16


def test_atomics_return_the_old_value(ctx, peer_ctx, pair):
    client, _ = pair
    word = np.array([40, 0], dtype=np.uint64)
    remote_region = peer_ctx.register(word, ALL)
    remote = remote_region.descriptor
    old = np.zeros(2, np.uint64)
    old_region = ctx.register(old)
    client.wait(client.fetch_add(old_region[0:8], remote.at(0), 2), timeout=5)
    assert old[0] == 40 and word[0] == 42
    client.wait(client.compare_swap(old_region[8:16], remote.at(0), 42, 99), timeout=5)
    assert old[1] == 42 and word[0] == 99
    client.wait(client.compare_swap(old_region[0:8], remote.at(0), 1, 5), timeout=5)
    assert old[0] == 99 and word[0] == 99  # compare failed: unchanged


def test_chain_gets_consecutive_ids_and_unsignaled_ops(ctx, peer_ctx, pair):
    client, _ = pair
    source = ctx.register(np.arange(64, dtype=np.uint8))
    target = np.zeros(64, np.uint8)
    remote_region = peer_ctx.register(target)
    remote = remote_region.descriptor
    chain = [WorkRequest(Opcode.WRITE, source[i * 8:(i + 1) * 8], remote.at(i * 8), signaled=False) for i in range(7)]
    chain.append(WorkRequest(Opcode.WRITE, source[56:64], remote.at(56)))
    first = client.post(chain)
    done = client.wait(first + 7, timeout=5)
    assert done.id == first + 7 and np.array_equal(target, np.arange(64, dtype=np.uint8))
    with pytest.raises(rdmakit.TimeoutError):
        client.wait(first, timeout=0.05)  # unsignaled: no completion ever comes
    with pytest.raises(rdmakit.InvalidArgumentError):
        client.post([])
    with pytest.raises(rdmakit.InvalidArgumentError, match="remote"):
        client.post([WorkRequest(Opcode.WRITE, source)])


def test_remote_access_error_is_sticky_and_flushes(ctx, peer_ctx, pair):
    client, _ = pair
    source = ctx.register(np.ones(64, np.uint8))
    target_region = peer_ctx.register(np.zeros(64, np.uint8))
    target = target_region.descriptor
    bad = client.write(source, target.at(32))  # 64 bytes at offset 32 of 64: out of bounds
    # RC rules (the same on every transport): a post behind the failure is accepted and flushed; health()
    # returns the original error.
    behind = client.write(source[0:8], target.at(0))
    with pytest.raises(rdmakit.RemoteAccessError) as caught:
        client.wait(bad, timeout=5)
    assert caught.value.status == Status.REMOTE_ACCESS and caught.value.errc == rdmakit.Errc.TRANSPORT_FAILURE
    assert client.wait(behind, timeout=5, check=False).status == Status.FLUSHED
    with pytest.raises(rdmakit.RemoteAccessError, match="remote access"):
        client.health()
    later = client.write(source, target.at(0))
    assert client.wait(later, timeout=5, check=False).status == Status.FLUSHED


def test_read_only_region_refuses_remote_write(ctx, peer_ctx, pair):
    client, _ = pair
    target_region = peer_ctx.register(np.zeros(64, np.uint8), Access.REMOTE_READ)
    target = target_region.descriptor
    with pytest.raises(rdmakit.RemoteAccessError):
        client.wait(client.write(ctx.register(np.ones(8, np.uint8)), target), timeout=5)


def test_send_without_receive_fails_after_rnr(ctx, pair):
    client, _ = pair
    with pytest.raises(rdmakit.OperationError) as caught:
        client.wait(client.send(ctx.register(bytearray(8))), timeout=10)
    assert caught.value.status == Status.RNR_RETRY_EXCEEDED


def test_stale_descriptor_from_another_context(ctx, peer_ctx, pair, transport):
    client, _ = pair
    with rdmakit.Context(transport=transport) as third:
        foreign_region = third.register(np.zeros(8, np.uint8))
        foreign = foreign_region.descriptor
        with pytest.raises(rdmakit.StaleDescriptorError):
            client.write(ctx.register(bytearray(8)), foreign)


def test_shared_completion_queue(ctx, peer_ctx):
    from conftest import connect_pair

    cq = ctx.create_cq()
    first, first_peer = connect_pair(ctx, peer_ctx, client={"send_cq": cq})
    second, second_peer = connect_pair(ctx, peer_ctx, client={"send_cq": cq})
    target = np.zeros(16, np.uint8)
    remote_region = peer_ctx.register(target)
    remote = remote_region.descriptor
    source = ctx.register(np.arange(16, dtype=np.uint8))
    ids = {first.write(source[0:8], remote.at(0)), second.write(source[8:16], remote.at(8))}
    seen = set()
    while len(seen) < 2:
        batch = cq.wait(max=4, timeout=5)
        assert batch, "no completion within 5 s"
        seen |= {c.id for c in batch if c.ok}
    assert seen == ids and {c for c in (first.number, second.number)} and cq.poll() == []
    assert np.array_equal(target, np.arange(16, dtype=np.uint8))
    assert cq.wait(timeout=0.01) == []
    assert first.send_cq is cq and first.recv_cq is None
    for conn in (first, first_peer, second, second_peer):
        conn.close()


def test_diagnostics_and_peer(ctx, pair):
    client, _ = pair
    assert client.peer["epoch"] != 0 and client.stats()["outstanding"] == 0
    assert any(s["connection"] == client.number for s in ctx.diagnostics())
    assert ctx.transport in ("tcp", "shm") and ctx.capabilities["max_sge"] >= 1
    # The transport's own counters, by name: tcp keeps its ACK and responder figures; shm keeps none.
    counters = client.stats()["transport_counters"]
    if ctx.transport == "tcp":
        assert set(counters) == {"queued_responses", "responder_pauses", "ack_frames", "acks_on_requests"}
        assert all(isinstance(value, int) for value in counters.values())
    else:
        assert counters == {}


def test_waiting_releases_the_gil(ctx, pair):
    import threading
    import time

    client, _ = pair
    # A receive nobody sends to: waiting on it spends the whole timeout (an unknown id fails at once).
    pending = client.post_recv(ctx.register(bytearray(64)))
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        time.sleep(0.05)
        before = counter[0]
        start = time.monotonic()
        with pytest.raises(rdmakit.TimeoutError):
            client.wait(pending, timeout=0.5)  # nothing completes: the whole half second is spent waiting
        waited = time.monotonic() - start
        during = counter[0] - before
    finally:
        stop.set()
        worker.join()
    assert waited >= 0.45
    # With the GIL held for 0.5 s the other thread could not count at all; released, it counts freely.
    assert during > 10_000, f"the other thread ran only {during} iterations while we waited"


def test_out_of_range_integers_name_the_argument(ctx, peer_ctx, pair):
    """Negative or oversized integers are rdmakit.InvalidArgumentError naming the argument and its range, not
    pybind11's "incompatible function arguments" (a TypeError) or a message about another option."""
    client, _ = pair
    region = ctx.register(np.zeros(64, np.uint8), ALL)
    remote = peer_ctx.register(np.zeros(64, np.uint64), ALL).descriptor
    cases = [
        (lambda: region.slice(-1), r"offset must be in \[0, 18446744073709551615\], not -1"),
        (lambda: region.slice(0, -5), "length must be in .*, not -5"),
        (lambda: region.slice(0.5), r"offset must be an integer in \[0, .*\], not 0.5 \(float\)"),
        (lambda: ctx.allocate(-1), "size must be in .*, not -1"),
        (lambda: client.write_imm(region, remote.at(0), imm=2 ** 40),
         r"imm must be in \[0, 4294967295\], not 1099511627776"),
        (lambda: client.send_imm(region, -3), r"imm must be in \[0, 4294967295\], not -3"),
        (lambda: client.compare_swap(region[0:8], remote.at(0), 0, desired=2 ** 70), "desired must be in"),
        (lambda: client.fetch_add(region[0:8], remote.at(0), -1), "add must be in"),
        (lambda: WorkRequest(Opcode.WRITE, region, remote, swap=-2), "swap must be in"),
        (lambda: rdmakit.RemoteAddress(-1, 0), "addr must be in"),
        (lambda: remote.at(-8), "offset must be in"),
        (lambda: ctx.create_cq(-1), "depth must be in"),
        (lambda: rdmakit.Context(transport=ctx.transport, timeout_ms=-1),
         r"option timeout_ms \(RDMAKIT_TIMEOUT_MS\): '-1' is not valid"),
        (lambda: rdmakit.Context(transport=ctx.transport, cq_depth=2 ** 33),
         r"option cq_depth \(RDMAKIT_CQ_DEPTH\): '8589934592' is not valid"),
    ]
    for call, message in cases:
        with pytest.raises(rdmakit.InvalidArgumentError, match=message):
            call()
    assert client.stats()["posted"] == 0  # nothing was posted by a refused call
