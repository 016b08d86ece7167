"""The transfer engine from Python: segments published by another process, batches of READs and WRITEs whose
bytes are checked exactly, per-request outcomes, a dead owner, the broadcast, and every kind of bad input."""

import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

import rdmakit
from rdmakit import xfer

OWNER = pathlib.Path(__file__).with_name("xfer_owner.py")
SIZE = 3 * (1 << 20) + 123  # several stripes (1 MiB) and a ragged end


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)


@pytest.fixture
def server():
    with xfer.serve_metadata() as running:
        yield running


class Owner:
    """xfer_owner.py in a process of its own."""

    def __init__(self, url, transport):
        self.proc = subprocess.Popen([sys.executable, str(OWNER), url, transport, str(SIZE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("ready "), line + self.proc.stdout.read()
        self.name = line.split()[1]

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
        return self.proc.wait(timeout=60)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_two_processes_read_and_write_exact_bytes(server, transport):
    owner = Owner(server.url, transport)
    try:
        with xfer.Engine(xfer.open_metadata(server.url), transports=[transport], transport=transport) as engine:
            src = engine.open_segment("src")
            assert (src.length, src.owner, src.transport) == (SIZE, owner.name, transport)

            # READ the whole segment in uneven pieces, into slices of one registered array.
            local = np.zeros(SIZE, dtype=np.uint8)
            engine.register_local(local)
            cuts = [0, 1, 4096, 4096 + 16384, (1 << 20) + 7, SIZE]
            batch = engine.submit([(xfer.READ, local[a:b], src, a) for a, b in zip(cuts, cuts[1:])])
            assert batch.wait(timeout=60) == [None] * (len(cuts) - 1)
            assert batch.done and batch.failed == 0
            np.testing.assert_array_equal(local, pattern(1, SIZE))

            # WRITE a new pattern into the owner's allocated segment: 64 small adjacent requests (coalesced) and
            # one large one (striped); the owner checks every byte in its own memory.
            out = pattern(2, SIZE)
            engine.register_local(out)
            dst = engine.open_segment("dst")
            small = [(xfer.WRITE, out[i * 4096:(i + 1) * 4096], dst, i * 4096) for i in range(64)]
            rest = 64 * 4096
            engine.submit(small + [(xfer.WRITE, out[rest:], dst, rest)]).wait(timeout=60)
            assert owner.ask("check 2") == "dst ok"

            # A torch tensor as local memory (data_ptr, no copy): read the owner's segment back into it.
            torch = pytest.importorskip("torch")
            tensor = torch.zeros(SIZE, dtype=torch.uint8)
            engine.register_local(tensor)
            engine.submit([("read", tensor[:SIZE // 2], dst, 0), ("read", tensor[SIZE // 2:], dst, SIZE // 2)]).wait(60)
            np.testing.assert_array_equal(tensor.numpy(), out)
            stats = engine.stats()
            assert stats["resolves"] == 2  # one lookup per name; the rest came from the cache
            # Per rail: every work request went out on some rail, and the rails are the engine's transports.
            assert sum(rail["work_requests"] for rail in stats["rails"]) == stats["work_requests"] > 0
            assert all(set(rail) == {"transport", "device", "work_requests"} for rail in stats["rails"])
    finally:
        assert owner.stop() == 0


def test_dead_owner_fails_its_requests(server):
    owner = Owner(server.url, "tcp")
    with xfer.Engine(xfer.open_metadata(server.url), transports=["tcp"], peer_timeout=1.0,
                     connect_timeout=1.0) as engine:
        local = np.zeros(SIZE, dtype=np.uint8)
        engine.register_local(local)
        src = engine.open_segment("src")
        engine.submit([(xfer.READ, local, src, 0)]).wait(timeout=60)
        owner.proc.kill()
        assert owner.proc.wait(timeout=60) != 0
        # Reported failed, within a bounded time, never successful.
        with pytest.raises(rdmakit.Error) as failure:
            batch = engine.submit([(xfer.READ, local, src, 0), (xfer.READ, local[:10], src, 10)])
            outcomes = batch.wait(timeout=60, check=False)
            assert batch.failed == 2 and all(isinstance(o, rdmakit.Error) for o in outcomes)
            batch.wait(timeout=60)
        assert "request 0: " in str(failure.value)  # e.g. "request 0: nobody listens at 127.0.0.1:35535"


@pytest.fixture
def engines(server):
    """An owner and a peer engine in this process (tcp), the owner publishing 'seg' (64 KiB)."""
    owner = xfer.Engine(xfer.open_metadata(server.url), name="owner", transports=["tcp"])
    peer = xfer.Engine(xfer.open_metadata(server.url), name="peer", transports=["tcp"])
    owner.publish("seg", np.zeros(1 << 16, dtype=np.uint8))
    yield owner, peer
    peer.close()
    owner.close()


def test_bad_requests_name_the_request_and_the_problem(engines):
    owner, peer = engines
    seg = peer.open_segment("seg")
    local = np.zeros(4096, dtype=np.uint8)
    peer.register_local(local)
    good = (xfer.WRITE, local, seg, 0)
    cases = [
        ((xfer.READ, local, seg, (1 << 16) - 100), "request 1: offset 65436 + length 4096 is outside segment 'seg'"),
        ((xfer.WRITE, local, seg, 0, 0), "request 1: length is 0"),
        ((xfer.WRITE, local, seg, 0, 5000), "request 1: length 5000 exceeds the local buffer (4096 bytes)"),
        ((xfer.WRITE, np.zeros(16, dtype=np.uint8), seg, 0), "request 1: local memory of 16 bytes"),
        ((xfer.READ, bytes(16), seg, 0), "request 1: the buffer is read-only"),
        (("delete", local, seg, 0), "request 1: op 'delete' is neither READ nor WRITE"),
        ((7, local, seg, 0), "request 1: op 7 (int) is not rdmakit.xfer.READ or WRITE"),
        ((xfer.WRITE, local, "seg", 0), "request 1: segment 'seg' (str) is not an rdmakit.xfer.Segment"),
        ((xfer.WRITE, local, seg, -1), "request 1: offset -1 (int) is not an int >= 0"),
        ((xfer.WRITE, object(), seg, 0), "request 1: a object has no memory to register"),
        ((xfer.WRITE, local), "request 1: expected (op, local, segment, offset[, length])"),
        ((xfer.WRITE, local, owner.open_segment("seg"), 0), "request 1: segment 'seg' was opened by another engine"),
    ]
    for bad, message in cases:
        with pytest.raises(rdmakit.InvalidArgumentError) as error:
            peer.submit([good, bad])
        assert message in str(error.value), (bad, str(error.value))
        assert error.value.errc == rdmakit.Errc.INVALID_ARGUMENT
    with pytest.raises(rdmakit.InvalidArgumentError, match="the batch is empty"):
        peer.submit([])
    assert peer.stats()["requests"] == 0  # every bad batch was refused whole


def test_bad_names_options_and_stores(engines, server):
    owner, peer = engines
    with pytest.raises(rdmakit.NotFoundError, match="'nope' is not published"):
        peer.open_segment("nope")
    with pytest.raises(rdmakit.InvalidArgumentError, match="'seg' is already published"):
        owner.publish("seg", np.zeros(16, dtype=np.uint8))
    with pytest.raises(rdmakit.NotFoundError, match="'nope' is not ours"):
        owner.unpublish("nope")
    with pytest.raises(rdmakit.InvalidArgumentError, match="read-only"):
        owner.publish("ro", bytes(16))
    with pytest.raises(rdmakit.NotFoundError, match="not registered with register_local"):
        peer.unregister_local(np.zeros(16, dtype=np.uint8))
    with pytest.raises(rdmakit.InvalidArgumentError, match="unknown xfer Engine option 'stripes'"):
        xfer.Engine(xfer.open_metadata(server.url), stripes=4)
    with pytest.raises(rdmakit.InvalidArgumentError, match="option 'max_retries' has the wrong type"):
        xfer.Engine(xfer.open_metadata(server.url), max_retries="two")
    with pytest.raises(rdmakit.InvalidArgumentError, match="peer_timeout must be a positive number"):
        xfer.Engine(xfer.open_metadata(server.url), peer_timeout=-1)
    # Refused when made, not at the first request (which could only fail).
    with pytest.raises(rdmakit.InvalidArgumentError, match="transport 'nope' is not one of the engine's"):
        xfer.Engine(xfer.open_metadata(server.url), transports=["tcp"], transport="nope")
    with pytest.raises(rdmakit.InvalidArgumentError, match="transport 'shm' is not one of the engine's"):
        xfer.Engine(xfer.open_metadata(server.url), transports=["tcp"], transport="shm")
    with pytest.raises(rdmakit.InvalidArgumentError, match=r"size must be in \[0, .*\], not -1"):
        owner.allocate_segment("negative", -1)
    with pytest.raises(rdmakit.NotSupportedError, match="unknown backend 'ftp'"):
        xfer.open_metadata("ftp://x:1")
    with pytest.raises(rdmakit.Error, match="127.0.0.1:1"):
        xfer.open_metadata("builtin://127.0.0.1:1", timeout=1.0)
    peer.close()
    with pytest.raises(rdmakit.InvalidArgumentError, match="the xfer engine is closed"):
        peer.open_segment("seg")


def test_unpublished_segment_fails_cleanly_and_memory_stays_alive(engines):
    owner, peer = engines
    data = pattern(5, 1 << 16)
    owner.publish("data", data.copy())  # the engine holds the only reference to the published copy
    local = np.zeros(1 << 16, dtype=np.uint8)
    peer.register_local(local)
    seg = peer.open_segment("data")
    peer.submit([(xfer.READ, local, seg, 0)]).wait(timeout=60)
    np.testing.assert_array_equal(local, data)
    owner.unpublish("data")
    # The cached descriptor is stale now: the request fails (re-resolved: gone), nothing reads freed memory.
    # The message does not claim the owner died: a stopped owner's lease runs out the same way. It leads
    # with the failure that started the retries (the READ's own), then what the retry met.
    with pytest.raises(rdmakit.NotFoundError, match="request 0: first failure: .*READ of 65536 bytes at 0 of "
                                                    "segment 'data'.*; then retry 1: not found: segment 'data' "
                                                    r"is gone from the metadata \(unpublished, or its owner's "
                                                    "lease ran out: the owner died, is stopped"):
        peer.submit([(xfer.READ, local, seg, 0)]).wait(timeout=60)
    with pytest.raises(rdmakit.NotFoundError):
        peer.open_segment("data")


def test_metadata_store_and_broadcast(server):
    store = xfer.open_metadata(server.url, namespace="pytest")
    assert store.backend == "builtin"
    store.publish("k", b"\x00value")
    assert store.lookup("k") == b"\x00value" and "k" in store.keys()
    store.unpublish("k")
    assert store.lookup("k") is None

    size, receivers = (1 << 20) + 5, 2
    source = pattern(9, size)
    results, threads = {}, []

    def receive(rank):
        with rdmakit.Context(transport="tcp") as ctx:
            buffer = np.zeros(size, dtype=np.uint8)
            region = ctx.register(buffer, rdmakit.Access.ALL)
            try:
                xfer.broadcast_receive(ctx, store, region, rank, receivers, chunk_bytes=256 << 10, timeout=60)
                results[rank] = buffer
            except rdmakit.Error as error:
                results[rank] = error
            region.close()

    for rank in range(1, receivers + 1):
        threads.append(threading.Thread(target=receive, args=(rank,)))
        threads[-1].start()
    with rdmakit.Context(transport="tcp") as ctx:
        region = ctx.register(source, rdmakit.Access.ALL)
        sent = xfer.broadcast_send(ctx, store, region, receivers, chunk_bytes=256 << 10, timeout=60)
        assert sent["chunks"] == 5 and sent["seconds"] > 0
    for thread in threads:
        thread.join(timeout=120)
    for rank in range(1, receivers + 1):
        assert isinstance(results[rank], np.ndarray), results[rank]
        np.testing.assert_array_equal(results[rank], source)
    with pytest.raises(rdmakit.InvalidArgumentError, match="size"):
        with rdmakit.Context(transport="tcp") as ctx:
            xfer.broadcast_send(ctx, store, ctx.register(source), 1, size=size + 1)
    store.close()



def test_batch_wait_raises_naming_every_failed_request(engines):
    """wait() raises when any request failed, naming each failed request with its code and status (not only the
    first), with `failures` by index; wait(check=False) returns the outcomes without raising."""
    owner, peer = engines
    owner.publish("gone", np.zeros(4096, dtype=np.uint8))
    local = np.zeros(4096, dtype=np.uint8)
    peer.register_local(local)
    seg, gone = peer.open_segment("seg"), peer.open_segment("gone")
    owner.unpublish("gone")
    requests = [(xfer.READ, local, gone, 0), (xfer.READ, local, seg, 0), (xfer.WRITE, local, gone, 0)]
    batch = peer.submit(requests)
    outcomes = batch.wait(timeout=60, check=False)
    assert outcomes[1] is None and isinstance(outcomes[0], rdmakit.NotFoundError) and batch.failed == 2
    with pytest.raises(rdmakit.NotFoundError) as failure:
        batch.wait(timeout=60)
    message = str(failure.value)
    assert "2 of 3 requests failed" in message, message
    for i in (0, 2):
        # Each leads with the failure that started the retries (the remote access error), then the retry's.
        assert f"request {i}: first failure: transport failure: " in message, message
        assert "remote access error; then retry 1: not found: segment 'gone' is gone" in message, message
        assert "(not found, status remote access error)" in message, message
    assert "request 1" not in message
    assert sorted(failure.value.failures) == [0, 2]
    assert all(isinstance(e, rdmakit.NotFoundError) for e in failure.value.failures.values())
    np.testing.assert_array_equal(local, 0)  # request 1 read the owner's zeros


@pytest.mark.parametrize("transports", [["tcp"], None])  # None: the default rails (shm's arena first)
def test_allocated_memory_lives_while_an_array_refers_to_it(server, transports):
    """allocate / unpublish / publish the array under another name / unpublish freed the memory under the
    first array (tcp: SIGSEGV when writing it; default rails: the next allocation got the same address)."""
    options = {"transports": transports} if transports else {}
    with xfer.Engine(xfer.open_metadata(server.url), **options) as engine:
        first = engine.allocate_segment("a", 1 << 20)
        view = first[4096:]
        engine.unpublish("a")
        engine.publish("b", first)
        engine.unpublish("b")
        engine.register_local(first)
        engine.unregister_local(first)
        first[:] = 7  # still this array's memory
        second = engine.allocate_segment("c", 1 << 20)
        start, end = second.ctypes.data, second.ctypes.data + second.nbytes
        assert end <= first.ctypes.data or start >= first.ctypes.data + first.nbytes, "two segments alias"
        second[:] = 9
        assert (first == 7).all() and (view == 7).all()
        del first
        view[:] = 5  # a view keeps the memory too
        assert (view == 5).all() and (second == 9).all()
        # A peer reads what the second segment holds (the memory is still the engine's registered segment).
        local = np.zeros(1 << 20, dtype=np.uint8)
        engine.register_local(local)
        engine.submit([(xfer.READ, local, engine.open_segment("c"), 0)]).wait(timeout=60)
        assert (local == 9).all()


@pytest.fixture(params=["redis", "etcd"])
def server_url(request):
    """A real redis-server or etcd on a loopback port of its own, started (and stopped after) by the C++ tests'
    xfer_metadata_server, so both suites start servers the same way."""
    build = os.environ.get("RDMAKIT_TEST_PYTEST_BUILD_DIR")
    binary = pathlib.Path(build or ".") / "tests" / "xfer" / "metadata" / "xfer_metadata_server"
    if not build or not binary.exists():
        pytest.skip("xfer_metadata_server is not built (ctest sets RDMAKIT_TEST_PYTEST_BUILD_DIR)")
    server = subprocess.Popen([str(binary), request.param], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()  # printed once the server answers
        assert url.startswith(request.param + "://"), f"the {request.param} server did not start: {url!r}"
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)

def test_engine_over_a_real_metadata_server(server_url):
    owner = xfer.Engine(xfer.open_metadata(server_url, namespace="pytest"), transports=["tcp"])
    peer = xfer.Engine(xfer.open_metadata(server_url, namespace="pytest"), transports=["tcp"])
    data = pattern(11, 1 << 16)
    owner.publish("weights", data)
    local = np.zeros_like(data)
    peer.register_local(local)
    segment = peer.open_segment("weights")
    assert segment.owner == owner.name
    peer.submit([(xfer.READ, local, segment, 0)]).wait(timeout=60)
    np.testing.assert_array_equal(local, data)
    with pytest.raises(rdmakit.NotFoundError):
        peer.open_segment("absent")
    peer.close()
    owner.close()


def test_notification_ready_segment_prepared_list_and_non_blocking_submit(engines):
    owner, peer = engines
    pool = owner.allocate_segment("pool", 1 << 16, ready=False)
    with pytest.raises(rdmakit.NotFoundError):
        peer.open_segment("pool")  # not filled yet: not findable
    pool[:] = pattern(11, 1 << 16)
    owner.publish_ready("pool")
    seg = peer.open_segment("pool")
    local = np.zeros(1 << 16, dtype=np.uint8)
    peer.register_local(local)
    peer.submit([(xfer.READ, local, seg, 0)]).wait(timeout=60)
    np.testing.assert_array_equal(local, pool)

    # 16 WRITEs of 4 KiB, notified: the owner finds every byte in place when the message arrives.
    local[:] = pattern(12, 1 << 16)
    requests = [(xfer.WRITE, local[k * 4096:(k + 1) * 4096], seg, (15 - k) * 4096) for k in range(16)]
    batch = peer.submit(requests, notify=b"block 3")
    sender, segment, message = owner.wait_notification(timeout=30)
    assert (sender, segment, message) == ("peer", "pool", b"block 3")
    for k in range(16):
        np.testing.assert_array_equal(pool[(15 - k) * 4096:(16 - k) * 4096], local[k * 4096:(k + 1) * 4096])
    batch.wait(timeout=60)
    assert batch.notified is True
    assert owner.poll_notification() is None
    assert owner.stats()["notifications_received"] == 1

    prepared = peer.prepare(requests)
    assert len(prepared) == 16
    for seed, block in ((13, True), (14, False)):
        local[:] = pattern(seed, 1 << 16)
        peer.submit(prepared, block=block).wait(timeout=60)
        for k in range(16):
            np.testing.assert_array_equal(pool[(15 - k) * 4096:(16 - k) * 4096], local[k * 4096:(k + 1) * 4096])
    with pytest.raises(rdmakit.InvalidArgumentError):
        peer.submit(prepared, notify=b"x")
