"""Python objects may die in any order, with operations in flight, without a leak or a crash.

Run under AddressSanitizer by the sanitizer build's ctest (python/tests/CMakeLists.txt preloads libasan):
a region freed while a transport still writes into it would be reported there.
"""

import gc
import itertools
import time
import weakref

import numpy as np
import pytest

import rdmakit
from conftest import connect_pair

CLIENT_SIDE = ("context", "connection", "region", "array", "queue")


def live_objects():
    """The native objects the bindings made that are still alive, by kind (a debug counter)."""
    return rdmakit._rdmakit._live_objects()


def settled_live_objects(expected, timeout=10.0):
    """live_objects() once it equals `expected` (a transport thread may drop its last reference a moment
    after close), or as it is after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        live = live_objects()
        if live == expected or time.monotonic() > deadline:
            return live
        time.sleep(0.05)


def client_side(peer_ctx, remote):
    """A client with a READ and a WRITE in flight into/from its registered array."""
    ctx = rdmakit.Context(transport=peer_ctx.transport, timeout_ms=2000)
    queue = ctx.create_cq()
    connection, server = connect_pair(ctx, peer_ctx, client={"send_cq": queue})
    array = np.zeros(1 << 16, np.uint8)
    region = ctx.register(array)
    connection.read(region[0:32768], remote.at(0))
    connection.write(region[32768:65536], remote.at(32768))
    return {"context": ctx, "connection": connection, "region": region, "array": array, "queue": queue}, server


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_client_objects_die_in_every_order(transport):
    before = settled_live_objects(live_objects())
    with rdmakit.Context(transport=transport, timeout_ms=2000) as peer_ctx:
        target = np.full(1 << 16, 5, np.uint8)
        remote_region = peer_ctx.register(target)
        watched = []
        for order in itertools.permutations(CLIENT_SIDE):
            objects, server = client_side(peer_ctx, remote_region.descriptor)
            if not watched:  # the counter sees what this test makes, so the check below can fail
                during = live_objects()
                assert all(during[kind] > before[kind] for kind in ("Context", "Connection", "MemoryRegion",
                                                                    "CompletionQueue", "HeldBuffer")), during
            watched.append(weakref.ref(objects["array"]))
            for name in order:
                del objects[name]  # the last reference to it goes here
            server.close()
        gc.collect()
        assert all(ref() is None for ref in watched), "an array outlived every object that used it"
        assert peer_ctx.diagnostics() == [] or all(s["outstanding"] == 0 for s in peer_ctx.diagnostics())
        del server, remote_region
    # Every native object of the 120 orders (contexts, connections, regions, queues, held buffers) is gone.
    assert settled_live_objects(before) == before


SERVER_SIDE = ("context", "connection", "region", "array")


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_target_objects_die_in_every_order(transport):
    before = settled_live_objects(live_objects())
    with rdmakit.Context(transport=transport, timeout_ms=2000) as ctx:
        source = np.full(4096, 9, np.uint8)
        local = ctx.register(source)
        for order in itertools.permutations(SERVER_SIDE):
            peer_ctx = rdmakit.Context(transport=transport, timeout_ms=2000)
            client, server = connect_pair(ctx, peer_ctx)
            array = np.zeros(4096, np.uint8)
            objects = {"context": peer_ctx, "connection": server, "region": peer_ctx.register(array), "array": array}
            del peer_ctx, server, array
            descriptor = objects["region"].descriptor
            first = client.write(local, descriptor)
            for name in order:
                del objects[name]
            # Whatever died first, the client's operation completes (or fails cleanly), never hangs.
            completion = client.wait(first, timeout=10, check=False)
            assert completion.id == first
            client.close()
        del client, local
    assert settled_live_objects(before) == before, "native objects outlived every Python object"


def test_closing_everything_twice_and_using_closed_objects():
    ctx = rdmakit.Context(transport="tcp")
    peer = rdmakit.Context(transport="tcp")
    client, server = connect_pair(ctx, peer)
    region = ctx.register(bytearray(64))
    for obj in (client, server, region, ctx, peer):
        obj.close()
        obj.close()
    with pytest.raises(rdmakit.InvalidArgumentError, match="closed"):
        client.write(region, rdmakit.RemoteAddress(0, 0))
    with pytest.raises(rdmakit.InvalidArgumentError, match="closed"):
        ctx.register(bytearray(8))


def test_pending_operation_keeps_its_region_alive():
    with rdmakit.Context(transport="tcp") as ctx, rdmakit.Context(transport="tcp") as peer:
        client, server = connect_pair(ctx, peer)
        inbox = np.zeros(16, np.uint8)
        alive = weakref.ref(inbox)
        receive = server.post_recv(peer.register(inbox))
        del inbox
        gc.collect()
        assert alive() is not None, "the posted receive's array died before the receive completed"
        message = ctx.register(np.frombuffer(b"sixteen bytes!!!", np.uint8).copy())
        client.wait(client.send(message), timeout=5)
        assert server.wait(receive, timeout=5).bytes == 16  # releases the pin
        gc.collect()
        assert alive() is None, "the completed receive still pins its array"
        client.close(), server.close()


def test_receive_lands_after_the_arrays_name_is_gone():
    with rdmakit.Context(transport="tcp") as ctx, rdmakit.Context(transport="tcp") as peer:
        client, server = connect_pair(ctx, peer)
        inbox = np.zeros(16, np.uint8)
        view = inbox[:]  # a second reference, to read the bytes at the end
        receive = server.post_recv(peer.register(inbox))
        del inbox
        gc.collect()
        client.wait(client.send(ctx.register(np.frombuffer(b"sixteen bytes!!!", np.uint8).copy())), timeout=5)
        server.wait(receive, timeout=5)
        assert bytes(view) == b"sixteen bytes!!!"
        client.close(), server.close()
