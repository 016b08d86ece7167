"""Python objects may die in any order, with operations in flight, without a leak or a crash.

The rules each test drops objects against:
- core: a Region keeps its Context and the registered object; a Connection keeps its Context, its queues
  and every Region an unfinished operation uses; a Listener and a CompletionQueue keep their Context.
- xfer: an Engine keeps its MetadataStore; Segments, Batches and allocated arrays keep the Engine; a Batch
  keeps the buffers of its requests until it is done; an allocated segment's memory lives while any array
  or view over it does, unpublished or not, so its address is not handed out again meanwhile.
- ckpt: a Checkpointer keeps the arrays and tensors of its state.

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
from rdmakit import xfer
from rdmakit.ckpt import Checkpointer

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


# The store goes first in every order (the engine keeps it): 24 orders, as each engine costs its threads.
XFER_SIDE = ("engine", "segment", "batch", "array")


def test_xfer_objects_die_in_every_order():
    with xfer.serve_metadata() as server:
        owner = xfer.Engine(xfer.open_metadata(server.url), transports=["tcp"])
        owner.publish("source", np.full(1 << 16, 3, np.uint8))
        watched = []
        for order in itertools.permutations(XFER_SIDE):
            engine = xfer.Engine(xfer.open_metadata(server.url), transports=["tcp"])
            array = engine.allocate_segment("inbox", 1 << 16)
            view = array[4096:8192]  # its base is the segment's memory, not `array`
            segment = engine.open_segment("source")
            batch = engine.submit([(xfer.READ, array[:4096], segment, 0)])  # in flight while objects go
            objects = {"engine": engine, "segment": segment, "batch": batch, "array": array}
            watched += [weakref.ref(array), weakref.ref(view.base)]  # the base holds the memory and the engine
            del engine, segment, batch, array
            for name in order:
                del objects[name]  # the last reference (no cycles: reference counting frees at once)
                view[:] = 1  # the segment's memory is still ours, whatever went
            assert (view == 1).all()
            del view
        gc.collect()
        assert all(ref() is None for ref in watched), "an allocated array or its engine outlived every object"
        owner.close()


def test_checkpointer_and_its_state_die_in_every_order(tmp_path):
    for number, order in enumerate(itertools.permutations(("checkpointer", "state", "array"))):
        array = np.ones(1 << 16, np.float32)
        state = {"w": array}
        ckpt = Checkpointer(tmp_path / str(number), state, direct_io=False)
        ckpt.save(1)  # persisted in the background while the names go
        watched = weakref.ref(array)
        objects = {"checkpointer": ckpt, "state": state, "array": array}
        del ckpt, state, array
        for name in order:
            del objects[name]
            if "checkpointer" in objects:  # it still has its arrays: restoring writes into live memory
                assert watched() is not None and objects["checkpointer"].restore_latest() == 1
        assert watched() is None, "the state outlived the Checkpointer and every name"
