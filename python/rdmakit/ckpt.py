"""Checkpoints of numpy arrays and PyTorch state_dicts through rdmakit's checkpoint engine.

::

    from rdmakit.ckpt import Checkpointer
    ckpt = Checkpointer("/nvme/run1", {"model": model.state_dict(), "optim": optimizer.state_dict()})
    start = (ckpt.restore_latest() or -1) + 1     # loads in place; None on a fresh start
    for step in range(start, steps):
        train_step()
        if step % 100 == 0:
            ckpt.save(step)                          # returns once the state is copied; persists in the background
    ckpt.wait()                                      # the last checkpoint is durable

The state is a (nested) dict whose leaves are numpy arrays or CPU tensors; they are registered in place,
so they must keep their storage (update them in place, as optimizers do: ``param.data.copy_`` rather
than rebinding). Leaves that are not arrays (an optimizer's ``param_groups``, plain numbers) are not
checkpointed: they are listed in :attr:`Checkpointer.skipped` (keep them in your own configuration).
"""

from ._rdmakit import _CkptEngine

__all__ = ["Checkpointer", "flatten"]


def _is_array(value):
    if type(value).__module__.startswith("torch") and hasattr(value, "data_ptr"):
        return True
    return hasattr(value, "__array_interface__") and hasattr(value, "dtype")


def flatten(state, prefix=""):
    """(name, array) pairs of a nested dict/list state, names joined with '/'; and the skipped names."""
    arrays, skipped = [], []
    items = state.items() if isinstance(state, dict) else enumerate(state)
    for key, value in items:
        name = f"{prefix}{key}"
        if _is_array(value):
            if getattr(value, "ndim", 1) == 0 and hasattr(value, "reshape") and not hasattr(value, "data_ptr"):
                skipped.append(name)  # a numpy scalar is a copy, not state we could restore in place
            else:
                arrays.append((name, value))
        elif isinstance(value, (dict, list, tuple)):
            more, more_skipped = flatten(value, name + "/")
            arrays += more
            skipped += more_skipped
        else:
            skipped.append(name)
    return arrays, skipped


class Checkpointer:
    """Non-blocking checkpoints of a dict of arrays / a state_dict into ``directory``.

    ``keep``: checkpoints kept; ``lazy``: save() returns at once and copies in the background (call
    :meth:`wait_snapshot` before the state changes); ``incremental``: unchanged chunks are not rewritten.
    """

    def __init__(self, directory, state, keep=3, lazy=False, incremental=False, direct_io=True,
                 chunk_bytes=4 << 20, io_depth=4):
        arrays, self.skipped = flatten(state)
        if not arrays:
            raise ValueError("the state has no arrays or tensors to checkpoint")
        self.names = [name for name, _ in arrays]
        self._engine = _CkptEngine(str(directory), arrays, keep=keep, chunk_bytes=chunk_bytes, io_depth=io_depth,
                                   lazy=lazy, incremental=incremental, direct_io=direct_io)

    def save(self, step):
        """Snapshots the state as checkpoint ``step`` and persists it in the background."""
        self._engine.snapshot(step)

    def wait_snapshot(self):
        """Returns when the last save()'s copy is complete (lazy mode: call it before the state changes)."""
        self._engine.wait_snapshot()

    def wait(self):
        """Waits until the last save() is committed on disk; a dict report (step, path, bytes, seconds, ...)."""
        return self._engine.wait_persisted()

    def restore_latest(self):
        """Loads the newest good checkpoint into the state in place; its step, or None when there is none."""
        return self._engine.restore_latest()

    @property
    def state_bytes(self):
        """Bytes of state checkpointed."""
        return self._engine.state_bytes

    def close(self):
        """Waits for the checkpoint being persisted and stops the engine."""
        self._engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
