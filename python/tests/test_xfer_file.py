"""File segments from Python: an owner publishes a file (Engine.publish_file), a peer engine READs byte ranges
of it into a numpy array and, when the owner made it writable, WRITEs ranges of it; every byte is checked
against the file, read back with plain Python file reads."""

import numpy as np
import pytest

import rdmakit
from rdmakit import xfer

SIZE = (1 << 20) + 777  # a last block shorter than 4 KiB


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)


@pytest.fixture
def pair(tmp_path):
    with xfer.serve_metadata() as server:
        owner = xfer.Engine(xfer.open_metadata(server.url), name="file-owner", transports=["tcp"])
        peer = xfer.Engine(xfer.open_metadata(server.url), name="file-peer", transports=["tcp"])
        yield owner, peer, tmp_path
        peer.close()
        owner.close()


def test_file_segment_reads_ranges_and_writes_where_writable(pair):
    owner, peer, tmp_path = pair
    ro_path, rw_path = tmp_path / "ro.bin", tmp_path / "rw.bin"
    model = pattern(1, SIZE)
    model.tofile(ro_path)
    model.tofile(rw_path)
    owner.publish_file("ro", ro_path)  # a pathlib.Path
    owner.publish_file("rw", str(rw_path), writable=True)
    ro, rw = peer.open_segment("ro"), peer.open_segment("rw")
    assert ro.length == SIZE and rw.length == SIZE

    # READs of uneven ranges (aligned, unaligned, the last bytes) into slices of one registered array.
    local = np.zeros(SIZE, dtype=np.uint8)
    peer.register_local(local)
    cuts = [0, 1, 4095, 8192, 100_000, SIZE - 5, SIZE]
    peer.submit([(xfer.READ, local[a:b], ro, a) for a, b in zip(cuts, cuts[1:])]).wait(timeout=60)
    np.testing.assert_array_equal(local, model)

    # WRITEs into the writable one: unaligned ranges sharing 4 KiB blocks, and its last bytes.
    source = pattern(2, 3 * 4096)
    peer.register_local(source)
    ranges = [(10, 100), (110, 3000), (4000, 5000), (SIZE - 300, 300)]
    requests, at = [], 0
    for offset, length in ranges:
        requests.append((xfer.WRITE, source[at:at + length], rw, offset))
        model[offset:offset + length] = source[at:at + length]
        at += length
    peer.submit(requests).wait(timeout=60)
    on_disk = np.fromfile(rw_path, dtype=np.uint8)
    assert on_disk.size == SIZE
    np.testing.assert_array_equal(on_disk, model)
    local[:] = 0
    peer.submit([(xfer.READ, local, rw, 0)]).wait(timeout=60)
    np.testing.assert_array_equal(local, model)

    # The read-only segment refuses WRITEs at the owner; nothing grows a file; sync_writes needs writable.
    with pytest.raises(rdmakit.InvalidArgumentError, match="read-only"):
        peer.submit([(xfer.WRITE, source[:100], ro, 0)]).wait(timeout=60)
    with pytest.raises(rdmakit.InvalidArgumentError, match="outside"):
        peer.submit([(xfer.WRITE, source[:100], rw, SIZE - 50)])
    with pytest.raises(rdmakit.InvalidArgumentError, match="sync_writes"):
        owner.publish_file("sync", ro_path, sync_writes=True)
    np.testing.assert_array_equal(np.fromfile(ro_path, dtype=np.uint8), pattern(1, SIZE))

    # sync_writes: WRITEs land as any (each durable before it completes).
    sync_path = tmp_path / "sync.bin"
    pattern(3, SIZE).tofile(sync_path)
    owner.publish_file("sync", sync_path, writable=True, sync_writes=True)
    peer.submit([(xfer.WRITE, source, peer.open_segment("sync"), 5)]).wait(timeout=60)
    expected = pattern(3, SIZE)
    expected[5:5 + source.size] = source
    np.testing.assert_array_equal(np.fromfile(sync_path, dtype=np.uint8), expected)


def test_file_segment_on_this_host_is_read_locally_unless_turned_off(pair, tmp_path):
    """On the owner's host the peer reads the file itself (batch.paths says 'file', the owner's path is
    kept for WRITEs); an engine with file_local_reads=False sends every READ to the owner. Same bytes."""
    owner, peer, _ = pair
    path = tmp_path / "shard.bin"
    model = pattern(4, SIZE)
    model.tofile(path)
    owner.publish_file("shard", path)
    segment = peer.open_segment("shard")
    assert segment.read_locally
    local = np.zeros(SIZE, dtype=np.uint8)
    peer.register_local(local)
    batch = peer.submit([(xfer.READ, local[:65536], segment, 0), (xfer.READ, local[65536:], segment, 65536)])
    batch.wait(timeout=60)
    np.testing.assert_array_equal(local, model)
    assert batch.paths == {"transports": ["file"], "memory": ["host"], "file_requests_by_owner": 0,
                           "file_requests_local": 2}

    with xfer.serve_metadata() as server:
        owner2 = xfer.Engine(xfer.open_metadata(server.url), name="owner-2", transports=["tcp"])
        remote = xfer.Engine(xfer.open_metadata(server.url), name="remote", transports=["tcp"],
                             file_local_reads=False)
        owner2.publish_file("shard", path)
        far = remote.open_segment("shard")
        assert not far.read_locally
        into = np.zeros(SIZE, dtype=np.uint8)
        remote.register_local(into)
        batch = remote.submit([(xfer.READ, into, far, 0)])
        batch.wait(timeout=60)
        np.testing.assert_array_equal(into, model)
        assert batch.paths["transports"] == ["tcp"] and batch.paths["file_requests_by_owner"] == 1
        remote.close()
        owner2.close()
