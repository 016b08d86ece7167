"""Checkpoints of numpy arrays and PyTorch models and optimizers through rdmakit's checkpoint engine.

::

    from rdmakit.ckpt import Checkpointer
    ckpt = Checkpointer("/nvme/run1", {"model": model, "optim": optimizer})   # the objects, not state_dict()s
    start = (ckpt.restore_latest() or -1) + 1     # loads in place; None on a fresh start
    for step in range(start, steps):
        train_step()
        if step % 100 == 0:
            ckpt.save(step)                          # returns once the state is copied; persists in the background
    ckpt.wait()                                      # the last checkpoint is durable

The state is a (nested) dict whose leaves are numpy arrays or CPU tensors, objects with a ``state_dict()``
method (a torch Module or Optimizer), or functions (lambdas, methods, partials) returning such a dict. Objects
and functions are read again at every :meth:`Checkpointer.save` and :meth:`Checkpointer.restore_latest`: an
optimizer's state, which Adam and others create only at their first step, is checkpointed once it exists. (A
``state_dict()`` taken once, before that step, would hold no optimizer state, and so would every checkpoint:
it is refused.) When what the state holds has changed (new tensors, a tensor resized or given new storage),
the engine is made again over the new arrays before the save or restore.

Arrays are registered in place, so update them in place between saves (as optimizers do). Leaves that are
not arrays (an optimizer's ``param_groups``, plain numbers) are not checkpointed: they are listed in
:attr:`Checkpointer.skipped` (keep them in your own configuration).

Part of the state, as ``torch.distributed.checkpoint`` loads some keys: ``restore_latest(only=["model"])``
loads the arrays named (a name stands for itself and everything under it: ``"model"`` is every
``"model/..."``) and leaves every other array untouched. The checkpoint is still verified whole.

Per-step completion: ``Checkpointer(..., on_persisted=fn)`` calls ``fn(step, outcome)`` once per save, from
the engine's background thread, when the save is committed (``outcome``: the report dict of :meth:`wait`)
or has failed (``outcome``: the :class:`rdmakit.Error`, which the next call raises as well). An exception
``fn`` raises goes to ``sys.unraisablehook`` (printed) and checkpointing carries on. ``fn`` must not call
the Checkpointer, and should be quick: the next save waits for it. Not called once the interpreter exits.
"""

import functools
import inspect

from ._rdmakit import _CkptEngine

__all__ = ["Checkpointer", "flatten"]


def _is_array(value):
    if isinstance(value, type):  # np.float32 and other classes have the attributes, not the memory
        return False
    if type(value).__module__.startswith("torch") and hasattr(value, "data_ptr"):
        return True
    return hasattr(value, "__array_interface__") and hasattr(value, "dtype")


def _read(value):
    """What a value of the state stands for now: an object's state_dict(), a function's result, or itself."""
    if _is_array(value):
        return value
    if callable(getattr(value, "state_dict", None)):
        return value.state_dict()
    if inspect.isroutine(value) or isinstance(value, functools.partial):  # not classes (np.float32, ...)
        return value()
    return value


def flatten(state, prefix=""):
    """(name, array) pairs of a nested dict/list state, names joined with '/'; and the skipped names.

    Objects with ``state_dict()`` and functions are replaced by what they return, read now."""
    arrays, skipped = [], []
    state = _read(state)
    items = state.items() if isinstance(state, dict) else enumerate(state)
    for key, value in items:
        name = f"{prefix}{key}"
        value = _read(value)
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


def _where(array):
    """What the engine depends on: the memory (address, bytes), dtype and shape of one array."""
    if hasattr(array, "data_ptr"):
        return (array.data_ptr(), array.numel() * array.element_size(), str(array.dtype), tuple(array.shape),
                array.is_contiguous())
    interface = array.__array_interface__
    return (interface["data"][0], array.nbytes, str(array.dtype), tuple(array.shape))


def _optimizers(state):
    """The torch optimizers among the values of the state (one level of nesting, as in the examples)."""
    values = state.values() if isinstance(state, dict) else [state]
    return [v for v in values if type(v).__module__.startswith("torch.optim") and hasattr(v, "param_groups")]


def _create_optimizer_state(optimizer):
    """Makes an optimizer create its state (Adam's exp_avg, ...) without changing the parameters: one step with
    zero gradients and a learning rate of 0, the gradients put back after. Restoring then overwrites it."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    grads = [p.grad for p in params]
    rates = [group.get("lr") for group in optimizer.param_groups]
    try:
        for p in params:
            p.grad = p.new_zeros(p.shape)
        for group in optimizer.param_groups:
            if "lr" in group:
                group["lr"] = 0.0
        optimizer.step()
    finally:
        for p, grad in zip(params, grads):
            p.grad = grad
        for group, rate in zip(optimizer.param_groups, rates):
            if rate is not None:
                group["lr"] = rate


def _stateless_optimizer_dicts(state, prefix=""):
    """Names of the values that are an optimizer's state_dict() taken before its state existed."""
    if not isinstance(state, dict):
        return []
    if set(state) == {"state", "param_groups"} and not state["state"]:
        return [prefix.rstrip("/") or "<state>"]
    found = []
    for key, value in state.items():
        found += _stateless_optimizer_dicts(value, f"{prefix}{key}/")
    return found


class Checkpointer:
    """Non-blocking checkpoints of a dict of arrays, state_dicts, models and optimizers into ``directory``.

    ``keep``: checkpoints kept; ``lazy``: save() returns at once and copies in the background (call
    :meth:`wait_snapshot` before the state changes); ``incremental``: unchanged chunks are not rewritten;
    ``on_persisted``: ``fn(step, outcome)`` called once per save when it is committed or has failed (see
    the module's documentation); ``replica``: the address of an ``rdmakit-ckpt serve`` whose memory also
    receives every committed checkpoint (one-sided WRITEs; a restore whose disk copy is gone or damaged
    reads it from there, and :attr:`restored_from` then says ``replica at <address>``); ``communicator``: an
    :class:`rdmakit.Communicator` of every rank, for one checkpoint of the whole job (each rank writes its
    shard into ``directory``, one the ranks share or its node's own; the commit is collective, so every rank
    calls ``save`` with the same steps). Give the engine a communicator of its own, not the one the training
    uses (``Communicator.from_environment(key_prefix="ckpt/")``): it runs collectives from a background thread.
    When the state's arrays move or change (an optimizer's first step creates its state), the engine is made
    again, collectively: every rank must see that change at the same ``save`` (as SPMD training does), else
    the ranks wait at mismatched collectives and fail with the communicator's timeout.
    """

    def __init__(self, directory, state, keep=3, lazy=False, incremental=False, direct_io=True,
                 chunk_bytes=4 << 20, io_depth=4, on_persisted=None, replica=None, communicator=None):
        self._directory = str(directory)
        self._state = state
        self._options = dict(keep=keep, chunk_bytes=chunk_bytes, io_depth=io_depth, lazy=lazy,
                             incremental=incremental, direct_io=direct_io, on_persisted=on_persisted,
                             replica="" if replica is None else str(replica), communicator=communicator)
        self._engine = None
        self._layout = None
        stateless = _stateless_optimizer_dicts(state)
        if stateless:  # every checkpoint would silently lack the optimizer's state
            raise ValueError(f"{stateless[0]!r} is an optimizer's state_dict() taken before its first step, when it "
                             "has no state yet (Adam creates it then): pass the optimizer itself, so that save() "
                             "reads its state_dict() each time")
        self._refresh()

    def _refresh(self):
        """Reads the state again; makes the engine again when its arrays moved, changed or are others."""
        arrays, skipped = flatten(self._state)
        if not arrays:
            raise ValueError("the state has no arrays or tensors to checkpoint")
        layout = [(name, _where(array)) for name, array in arrays]
        if layout == self._layout:
            return
        if self._engine is not None:
            # Waits for the checkpoint being persisted, so the new engine finds it the newest on disk.
            self._engine.close()
        self._engine = _CkptEngine(self._directory, arrays, **self._options)
        self._layout, self.skipped = layout, skipped
        self.names = [name for name, _ in arrays]

    def save(self, step):
        """Snapshots the state as checkpoint ``step`` and persists it in the background. A step older than the
        newest checkpoint is refused (restore_latest() would never load it)."""
        self._refresh()
        self._engine.snapshot(step)

    def wait_snapshot(self):
        """Returns when the last save()'s copy is complete (lazy mode: call it before the state changes)."""
        self._engine.wait_snapshot()

    def wait(self):
        """Waits until the last save() is committed on disk; a dict report (step, path, bytes, seconds, ...)."""
        return self._engine.wait_persisted()

    def _select(self, only):
        """The engine's names for ``only``: each name itself, or every array under it (``name/...``). A
        name that matches nothing is passed on as it is, for the engine to refuse naming it."""
        if only is None:
            return None
        if isinstance(only, str):
            only = [only]
        names = []
        for wanted in only:
            matched = [n for n in self.names if n == wanted or n.startswith(f"{wanted}/")]
            names += matched or [wanted]
        return list(dict.fromkeys(names))

    def restore_latest(self, strict=True, only=None):
        """Loads the newest good checkpoint into the state in place; its step, or None when there is none.

        ``strict`` (the default): when checkpoints exist but none has the state's names, dtypes and shapes,
        raises :class:`rdmakit.InvalidArgumentError` naming the difference (as torch's
        ``load_state_dict``); ``strict=False`` returns None then (a fresh start). A torch optimizer without
        state yet (before its first step) is given its state first, so that the checkpoint's can be loaded.
        ``only``: names (as in :attr:`names`, or a prefix such as ``"model"``) of the arrays to load; every
        other array is left untouched (the checkpoint must still match the whole state, and is verified
        whole). An unknown name raises :class:`rdmakit.InvalidArgumentError` and nothing is loaded.
        """
        self._prepare_restore()
        return self._engine.restore_latest(strict=strict, only=self._select(only))

    def restore(self, step, only=None):
        """Loads checkpoint ``step`` into the state in place and returns it (not the newest one: an older
        step that is still kept). Raises :class:`rdmakit.NotFoundError` when that step is not in the
        directory or does not verify; never loads another step. ``only``: as in :meth:`restore_latest`."""
        self._prepare_restore()
        return self._engine.restore(step, only=self._select(only))

    def _prepare_restore(self):
        if self._engine.newest_step is not None:
            for optimizer in _optimizers(self._state):
                if not optimizer.state:
                    _create_optimizer_state(optimizer)
        self._refresh()

    @property
    def state_bytes(self):
        """Bytes of state checkpointed."""
        return self._engine.state_bytes

    @property
    def restored_from(self):
        """Where the last restore's data came from: the checkpoint's directory, or 'replica at ADDR'."""
        return self._engine.restored_from

    def close(self):
        """Waits for the checkpoint being persisted and stops the engine."""
        self._engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
