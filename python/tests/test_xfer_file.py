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
