"""The checkpoint engine from Python: numpy dicts and torch state_dicts, save/wait/restore."""

import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

import rdmakit
from rdmakit._rdmakit import _CkptEngine
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
        assert again.restored_from == ""
        assert again.restore_latest() == 2
        assert again.restored_from == f"{tmp_path}/ckpt-{2:020d}"
    assert np.array_equal(weights, np.arange(100_000, dtype=np.float32) + 1) and (bias == 1).all()


def test_restore_a_chosen_step(tmp_path):
    weights = np.zeros(50_000, dtype=np.float32)
    with Checkpointer(tmp_path, {"w": weights}, keep=3, direct_io=False) as ckpt:
        for step in (1, 2, 3):
            weights[:] = step
            ckpt.save(step)
            ckpt.wait()
        weights[:] = -1
        assert ckpt.restore(2) == 2 and (weights == 2).all()
        with pytest.raises(rdmakit.NotFoundError):
            ckpt.restore(9)
        assert (weights == 2).all()
        assert ckpt.restore(3) == 3 and (weights == 3).all()


def _replica_server():
    """An `rdmakit-ckpt serve` of this build on a free loopback port: (process, address)."""
    build = os.environ.get("RDMAKIT_TEST_PYTEST_BUILD_DIR", "")
    if not build:
        pytest.skip("no build directory given (RDMAKIT_TEST_PYTEST_BUILD_DIR): rdmakit-ckpt serve unknown")
    tool = os.path.join(build, "tools", "rdmakit-ckpt")
    assert os.access(tool, os.X_OK), f"{tool} is not built"
    server = subprocess.Popen([tool, "serve", "--listen", "127.0.0.1:0", "--budget", "64"],
                              stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()  # "serving on 127.0.0.1:PORT, budget 64 MiB"
    assert line.startswith("serving on "), line
    return server, line.split()[2].rstrip(",")


def test_replica_restores_after_the_disk_is_lost(tmp_path):
    server, address = _replica_server()
    try:
        weights = np.arange(300_000, dtype=np.float32)
        directory = tmp_path / "disk"
        with Checkpointer(directory, {"w": weights}, direct_io=False, replica=address) as ckpt:
            ckpt.save(1)
            weights += 1
            ckpt.save(2)
            report = ckpt.wait()
            assert report["step"] == 2 and report["replicated"] is True
        shutil.rmtree(directory)  # the node's disk is gone; the peer's memory is not
        weights[:] = -1
        with Checkpointer(directory, {"w": weights}, direct_io=False, replica=address) as again:
            assert again.restore_latest() == 2
            assert again.restored_from == f"replica at {address}"
        assert np.array_equal(weights, np.arange(300_000, dtype=np.float32) + 1)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_ranks_of_a_communicator_commit_one_checkpoint_into_node_local_directories(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               RDMAKIT_JOB_SECRET=secrets.token_hex(16), RDMAKIT_COLL_TIMEOUT_MS="30000",
               RDMAKIT_BOOTSTRAP_TIMEOUT_MS="30000")
    worker = pathlib.Path(__file__).with_name("ckpt_worker.py")
    procs = [subprocess.Popen([sys.executable, str(worker), str(tmp_path)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{output}"
        assert f"rank {rank} of 2 ok" in output


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


def test_resized_tensor_is_refused_by_the_engine_and_followed_by_the_checkpointer(tmp_path):
    """resize_() moves a tensor's storage (the old 4 MiB is unmapped): restoring into the address the engine
    was given crashed. The engine now refuses, naming the tensor; the Checkpointer makes its engine again."""
    torch = pytest.importorskip("torch")
    weights = torch.ones(1 << 20)
    engine = _CkptEngine(str(tmp_path / "engine"), [("layer/w", weights)], direct_io=False)
    engine.snapshot(1)
    engine.wait_persisted()
    weights.resize_(4 << 20)
    for call in (engine.restore_latest, lambda: engine.snapshot(2)):
        with pytest.raises(rdmakit.InvalidArgumentError, match=r"tensor 'layer/w' changed .*\[1048576\] -> "
                                                                r"\[4194304\], storage moved"):
            call()
    engine.close()

    weights = torch.ones(1 << 20)
    with Checkpointer(tmp_path / "ckpt", {"w": weights}, direct_io=False) as ckpt:
        ckpt.save(1)
        ckpt.wait()
        weights.resize_(4 << 20).fill_(2)
        ckpt.save(2)  # over the resized tensor
        ckpt.wait()
        weights.zero_()
        assert ckpt.restore_latest() == 2
    assert weights.shape == (4 << 20,) and bool((weights == 2).all())


def test_optimizer_state_created_at_the_first_step_is_saved_and_restored(tmp_path):
    """Adam creates its state at its first step: a state_dict() taken before holds none, and every checkpoint
    silently lacked it. The optimizer object is read at each save; a fresh one is given its state to load."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    def make():
        model = torch.nn.Linear(8, 2)
        return model, torch.optim.Adam(model.parameters(), lr=0.1)

    def train(model, optimizer, step):
        optimizer.zero_grad()
        model(torch.full((4, 8), float(step))).pow(2).sum().backward()
        optimizer.step()

    model, optimizer = make()
    with pytest.raises(ValueError, match="'optim' is an optimizer's state_dict.* before its first step"):
        Checkpointer(tmp_path, {"model": model.state_dict(), "optim": optimizer.state_dict()})
    with Checkpointer(tmp_path, {"model": model, "optim": optimizer}, direct_io=False) as ckpt:
        assert ckpt.restore_latest() is None and not optimizer.state  # a fresh start leaves it untouched
        for step in range(3):
            train(model, optimizer, step)
            ckpt.save(step)
        ckpt.wait()
        assert "optim/state/0/exp_avg" in ckpt.names and "optim/state/1/exp_avg_sq" in ckpt.names

    resumed_model, resumed_optimizer = make()  # as a restarted process makes them
    with Checkpointer(tmp_path, {"model": resumed_model, "optim": resumed_optimizer}, direct_io=False) as again:
        assert again.restore_latest() == 2
    for (name, value), resumed in zip(optimizer.state_dict()["state"][0].items(),
                                      resumed_optimizer.state_dict()["state"][0].values()):
        assert torch.equal(value, resumed), name
    assert resumed_optimizer.param_groups[0]["lr"] == 0.1
    # Training goes on exactly as it would have without the restart.
    train(model, optimizer, 3)
    train(resumed_model, resumed_optimizer, 3)
    for name, value in model.state_dict().items():
        assert torch.equal(value, resumed_model.state_dict()[name]), name


def test_restore_refuses_checkpoints_that_do_not_fit_the_state(tmp_path):
    """Checkpoints whose shapes or dtypes differ from the state were skipped and restore_latest() returned
    None: training silently started again from step 0. Now an error, unless strict=False."""
    with Checkpointer(tmp_path, {"w": np.ones(16, np.float32)}, direct_io=False) as ckpt:
        ckpt.save(1)
        ckpt.wait()
    cases = [({"w": np.zeros(8, np.float32)}, r"in step 1, 'w' is f32 \[8\] here but f32 \[16\] in it"),
             ({"w": np.zeros(16, np.int32)}, r"'w' is i32 \[16\] here but f32 \[16\] in it"),
             ({"v": np.zeros(16, np.float32)}, "'v' is not in it"),
             ({"w": np.zeros(16, np.float32), "v": np.zeros(1)}, "'v' is not in it")]
    for state, message in cases:
        with Checkpointer(tmp_path, state, direct_io=False) as other:
            with pytest.raises(rdmakit.InvalidArgumentError, match=message):
                other.restore_latest()
            assert other.restore_latest(strict=False) is None
            assert all(not array.any() for array in state.values())  # untouched


def test_bad_steps_are_refused(tmp_path):
    state = {"w": np.ones(16, np.float32)}
    with Checkpointer(tmp_path, state, direct_io=False) as ckpt:
        ckpt.save(5)
        with pytest.raises(rdmakit.InvalidArgumentError, match="step 3 is older than step 5, the newest"):
            ckpt.save(3)  # restore_latest() would have returned 5 and never 3
        ckpt.save(6)
        ckpt.wait()
        for bad, message in ((-1, "step must be in .*, not -1"), (2 ** 64, "step must be in"),
                             ("7", r"step must be an integer .*\(str\)")):
            with pytest.raises(rdmakit.InvalidArgumentError, match=message):
                ckpt.save(bad)
    with Checkpointer(tmp_path, state, direct_io=False) as again:  # the newest on disk counts too
        with pytest.raises(rdmakit.InvalidArgumentError, match="step 0 is older than step 6"):
            again.save(0)
        assert again.restore_latest() == 6
    with pytest.raises(rdmakit.InvalidArgumentError, match="keep must be in"):
        Checkpointer(tmp_path, state, keep=-1)


def test_functions_in_the_state_are_read_at_each_save(tmp_path):
    current = {"w": np.ones(8, np.float32)}
    with Checkpointer(tmp_path, {"model": lambda: current, "dtype": np.float32}, direct_io=False) as ckpt:
        assert ckpt.names == ["model/w"] and ckpt.skipped == ["dtype"]  # a class is not called
        ckpt.save(1)
        current = {"w": np.full(4, 2, np.float32), "b": np.zeros(1, np.float32)}  # other arrays now
        ckpt.save(2)
        assert ckpt.names == ["model/w", "model/b"]
        ckpt.wait()
        current["w"][:] = 0
        assert ckpt.restore_latest() == 2 and (current["w"] == 2).all()


def _untouched(array):
    return (array.view(np.uint8) == 0xA5).all()


def test_restore_a_subset_of_the_state(tmp_path):
    """only=[...] loads the arrays named (a name also stands for what is under it) and no byte of the others;
    an unknown name is refused, naming it, before anything is loaded."""
    w, b = np.arange(70_000, dtype=np.float32), np.arange(33, dtype=np.int64)
    m = np.linspace(0, 1, 40_000, dtype=np.float64)
    state = {"model": {"w": w, "b": b}, "optim": {"m": m}}
    saved = {"w": w.copy(), "b": b.copy(), "m": m.copy()}

    def sentinel():
        for array in (w, b, m):
            array.view(np.uint8)[:] = 0xA5

    with Checkpointer(tmp_path, state, chunk_bytes=64 << 10, direct_io=False) as ckpt:
        ckpt.save(4)
        ckpt.wait()
        sentinel()
        assert ckpt.restore_latest(only=["model"]) == 4
        assert np.array_equal(w, saved["w"]) and np.array_equal(b, saved["b"]) and _untouched(m)
        sentinel()
        assert ckpt.restore(4, only="optim/m") == 4
        assert np.array_equal(m, saved["m"]) and _untouched(w) and _untouched(b)
        sentinel()
        with pytest.raises(rdmakit.InvalidArgumentError, match="'model/x'"):
            ckpt.restore_latest(only=["model/b", "model/x"])
        with pytest.raises(rdmakit.InvalidArgumentError, match="empty"):
            ckpt.restore(4, only=[])
        assert _untouched(w) and _untouched(b) and _untouched(m)
        with pytest.raises(rdmakit.NotFoundError):
            ckpt.restore(5, only=["model"])


def test_on_persisted_is_called_once_per_step_with_its_outcome(tmp_path):
    """fn(step, report) once per committed save, fn(step, error) for a failed one (which the next call raises
    too); close() right after a save waits for the callback, not deadlocking on the GIL."""
    import os
    import time

    weights = np.zeros(20_000, dtype=np.float32)
    seen = []

    def on_persisted(step, outcome):
        time.sleep(0.01)  # the persist thread holds the GIL a while: close() must not wait for it holding it too
        seen.append((step, outcome))

    directory = tmp_path / "run"
    ckpt = Checkpointer(directory, {"w": weights}, direct_io=False, on_persisted=on_persisted)
    for step in (1, 2, 3):
        weights[:] = step
        ckpt.save(step)
    assert ckpt.wait()["step"] == 3
    assert [step for step, _ in seen] == [1, 2, 3]
    assert all(isinstance(report, dict) and report["step"] == step for step, report in seen)

    os.rename(directory, tmp_path / "moved")  # a file where the directory was: the next save fails
    (tmp_path / "run").write_text("not a directory")
    ckpt.save(4)
    with pytest.raises(rdmakit.Error):
        ckpt.wait()
    assert seen[-1][0] == 4 and isinstance(seen[-1][1], rdmakit.Error) and "Not a directory" in str(seen[-1][1])
    (tmp_path / "run").unlink()
    os.rename(tmp_path / "moved", directory)
    ckpt.save(5)
    ckpt.close()
    assert [step for step, _ in seen] == [1, 2, 3, 4, 5] and seen[-1][1]["step"] == 5
    with pytest.raises(rdmakit.InvalidArgumentError):
        Checkpointer(tmp_path / "other", {"w": weights}, on_persisted="not callable")


def test_an_exception_in_on_persisted_is_reported_and_saves_go_on(tmp_path):
    import sys

    weights = np.zeros(20_000, dtype=np.float32)
    seen, reported = [], []

    def on_persisted(step, outcome):
        seen.append(step)
        if step == 1:
            raise RuntimeError("callback failed on purpose")

    hook = sys.unraisablehook
    sys.unraisablehook = reported.append
    try:
        with Checkpointer(tmp_path, {"w": weights}, direct_io=False, on_persisted=on_persisted) as ckpt:
            ckpt.save(1)
            assert ckpt.wait()["step"] == 1
            weights[:] = 2
            ckpt.save(2)
            assert ckpt.wait()["step"] == 2
            weights[:] = 0
            assert ckpt.restore_latest() == 2 and (weights == 2).all()
    finally:
        sys.unraisablehook = hook
    assert seen == [1, 2]
    assert len(reported) == 1 and "on purpose" in str(reported[0].exc_value)


def test_on_persisted_at_interpreter_exit(tmp_path):
    """The interpreter exits while a save is persisting and its callback may be running: the exit waits for
    a running callback, starts none after, and the process ends cleanly (no crash, no hang)."""
    import subprocess
    import sys

    script = f"""
import time
import numpy as np
from rdmakit.ckpt import Checkpointer

def on_persisted(step, outcome):
    print("persisted", step, flush=True)
    time.sleep(0.2)

state = {{"w": np.ones(1 << 20, dtype=np.float32)}}
ckpt = Checkpointer({str(tmp_path)!r}, state, direct_io=False, on_persisted=on_persisted)
ckpt.save(1)
ckpt.save(2)  # waits for step 1's callback; the interpreter exits while step 2 persists
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "persisted 1" in done.stdout
