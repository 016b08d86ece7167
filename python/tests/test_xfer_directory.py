"""Engine.publish_directory from Python: every shard of a directory becomes a file segment a peer READs; bad
directories raise, leaving nothing published."""

import os

import numpy as np
import pytest

import rdmakit
from rdmakit import xfer


def test_publish_directory_serves_each_shard_and_refuses_bad_input(tmp_path):
    shards = [np.random.default_rng(i).integers(0, 256, size=5000 + i, dtype=np.uint8) for i in range(3)]
    for i, shard in enumerate(shards):
        shard.tofile(tmp_path / f"s{i}.bin")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.bin").write_bytes(b"x" * 10)
    os.symlink(tmp_path / "s0.bin", tmp_path / "link.bin")
    with xfer.serve_metadata() as server:
        owner = xfer.Engine(xfer.open_metadata(server.url), name="dir-owner", transports=["tcp"])
        reader = xfer.Engine(xfer.open_metadata(server.url), name="dir-reader", transports=["tcp"])
        with owner, reader:
            assert owner.publish_directory("ds", str(tmp_path)) == ["ds/s0.bin", "ds/s1.bin", "ds/s2.bin"]
            local = np.zeros(3 * 8192, dtype=np.uint8)
            reader.register_local(local)
            requests = [(xfer.READ, local[i * 8192:i * 8192 + len(s)], reader.open_segment(f"ds/s{i}.bin"), 0)
                        for i, s in enumerate(shards)]
            reader.submit(requests).wait(20)
            for i, shard in enumerate(shards):
                assert np.array_equal(local[i * 8192:i * 8192 + len(shard)], shard)
            for skipped in ("ds/sub", "ds/sub/inner.bin", "ds/link.bin"):
                with pytest.raises(rdmakit.NotFoundError):
                    reader.open_segment(skipped)
            # The names are taken now: a second publish of the directory fails and publishes nothing more.
            with pytest.raises(rdmakit.InvalidArgumentError):
                owner.publish_directory("ds", str(tmp_path))
            (tmp_path / "bad\nname").write_bytes(b"y" * 10)
            with pytest.raises(rdmakit.InvalidArgumentError, match=r"\\x0a"):
                owner.publish_directory("other", str(tmp_path))
            with pytest.raises(rdmakit.NotFoundError):
                reader.open_segment("other/s0.bin")
            with pytest.raises(rdmakit.InvalidArgumentError):
                owner.publish_directory("", str(tmp_path))
            with pytest.raises(rdmakit.Error):
                owner.publish_directory("missing", str(tmp_path / "missing"))
