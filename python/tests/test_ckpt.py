"""The checkpoint engine from Python: numpy dicts and torch state_dicts, save/wait/restore."""

import numpy as np
import pytest

from rdmakit.ckpt import Checkpointer, flatten


def test_numpy_state_round_trip(tmp_path):
    weights = np.arange(100_000, dtype=np.float32)
    bias = np.ones(10, dtype=np.float64)
    state = {"layer": {"w": weights, "b": bias}, "lr": 0.1}
    with Checkpointer(tmp_path, state, keep=2, direct_io=False) as ckpt:
        assert ckpt.restore_latest() is None  # fresh start
        assert ckpt.skipped == ["lr"] and ckpt.names == ["layer/w", "layer/b"]
        ckpt.save(1)
        weights += 1  # the snapshot was taken before this
        assert ckpt.wait()["step"] == 1
        ckpt.save(2)
        report = ckpt.wait()
        assert report["step"] == 2 and report["bytes"] == weights.nbytes + bias.nbytes
        weights[:] = -1
        bias[:] = -1
    with Checkpointer(tmp_path, state, direct_io=False) as again:
        assert again.restore_latest() == 2
    assert np.array_equal(weights, np.arange(100_000, dtype=np.float32) + 1) and (bias == 1).all()


def test_torch_state_dict_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 16)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    with Checkpointer(tmp_path, state, direct_io=False) as ckpt:
        assert "optim/state/0/exp_avg" in ckpt.names and any(n.startswith("optim/param_groups") for n in ckpt.skipped)
        ckpt.save(7)
        ckpt.wait()
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        assert ckpt.restore_latest() == 7
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_flatten_refuses_empty_state(tmp_path):
    assert flatten({"a": 1}) == ([], ["a"])
    with pytest.raises(ValueError):
        Checkpointer(tmp_path, {"a": 1})
