"""The ``rdmakit`` backend of :mod:`torch.distributed`.

Importing this module registers the backend, after which existing scripts only change the backend name::

    import torch.distributed as dist
    import rdmakit.distributed  # registers "rdmakit"
    dist.init_process_group("rdmakit")  # launched by python3 -m torch.distributed.run, or mpirun

Collectives (allreduce, also bucketed and coalesced as DDP issues them; broadcast; allgather; reduce_scatter;
all_to_all; barrier; reduce, gather, scatter) and send/recv run on rdmakit's communicator: shared memory
between the ranks of one host, the network transport (``RDMAKIT_TRANSPORT``, tcp by default) between hosts.
CPU tensors (CUDA ones staged through host memory under torch 2.x). Reductions take float32, float64, float16,
bfloat16, int32, int64, uint8, int8 and bool and the ops SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM, and BAND, BOR
and BXOR over integers and bool; data movement takes every dtype. Non-contiguous tensors are staged through a
contiguous copy. Messages between two ranks match in the order they were issued, and their tags must agree.

Launchers: ``torch.distributed.run`` sets torch's ``env://`` variables itself. Under ``mpirun`` (Open MPI) or
``srun`` (Slurm), importing this module fills RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT from the launcher's own variables (the same rules as rdmakit's C++ ``detect_launch()``: rank 0's
host, a port derived from the job id), unless RANK is already set; so ``init_process_group("rdmakit")`` works
unchanged there too.

Timeouts: each collective is bounded by the ``timeout`` given to ``init_process_group`` unless
``RDMAKIT_COLL_TIMEOUT_MS`` is set; waiting for ranks to arrive by ``RDMAKIT_BOOTSTRAP_TIMEOUT_MS``.

Failures: a rank that exits on an uncaught exception aborts its groups first (``sys.excepthook``): the
other ranks' pending and next collectives raise within milliseconds naming that rank, instead of waiting
for the timeout, and its own exit waits for nobody. Under torch's launcher (or ``python3 -m rdmakit.run``)
the exception is also written to the launcher's error file, so its summary says which rank failed and why.
Collectives whose arguments differ between ranks (count, dtype, op, root) raise on the ranks involved.

Torch versions: 1.13 (a ``ProcessGroup``) and 2.x (a ``Backend``, registered for the "cpu" and "cuda"
devices, so that a CUDA tensor gets the backend's own error: it moves CPU tensors only, copy with ``.cpu()``).
See docs/torch.md for what is tested where.
"""

import json
import os
import sys
import time
import traceback
import weakref
from datetime import timedelta

import torch.distributed as dist

from ._rdmakit_torch import TORCH_MAJOR, ProcessGroupRdmakit, detect_launch

__all__ = ["BACKEND", "ProcessGroupRdmakit", "abort_all", "adopt_launcher_environment", "create_process_group",
           "detect_launch"]

#: The name to pass to ``torch.distributed.init_process_group``.
BACKEND = "rdmakit"


def create_process_group(store, rank: int, world_size: int, timeout: timedelta) -> ProcessGroupRdmakit:
    """The creator torch.distributed calls for ``backend="rdmakit"``: meets the other ranks through ``store``."""
    group = ProcessGroupRdmakit(store, rank, world_size, timeout)
    _groups.add(group)
    return group


# Every group this process made, for abort_all(); weak, so a destroyed group is not kept alive.
_groups = weakref.WeakSet()


def abort_all(reason: str) -> int:
    """Aborts every live rdmakit group of this process (the peers' collectives fail naming this rank); how many."""
    groups = list(_groups)
    for group in groups:
        group._abort(reason)
    return len(groups)


def _record_for_launcher(kind, error, trace) -> None:
    # torch's launcher (torchrun, rdmakit.run) gives each rank an error file and prints the first one in its
    # failure summary; torch's @record writes it only from inside an except block, so write it here.
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return
    message = {"message": f"{kind.__name__}: {error}",
               "extraInfo": {"py_callstack": "".join(traceback.format_exception(kind, error, trace)),
                             "timestamp": str(int(time.time()))}}
    try:
        with open(path, "w") as out:
            json.dump({"message": message}, out)
    except OSError:
        pass


def _abort_on_uncaught(kind, error, trace, previous=sys.excepthook):
    # An uncaught exception ends this process: its groups must not wait in their closing barrier for peers
    # that wait for this rank's next collective. KeyboardInterrupt too (the peers should not hang either).
    if _groups:
        abort_all(f"uncaught {kind.__name__}: {error}")
        _record_for_launcher(kind, error, trace)
    previous(kind, error, trace)

def adopt_launcher_environment(environ=os.environ) -> bool:
    """Fills torch's env:// variables from mpirun's or srun's when RANK is unset. True when it did."""
    if "RANK" in environ:
        return False
    info = detect_launch()
    if info["launcher"] not in ("mpirun", "srun"):
        return False
    values = {"RANK": info["rank"], "WORLD_SIZE": info["world_size"], "LOCAL_RANK": info["local_rank"],
              "MASTER_ADDR": info["store_host"], "MASTER_PORT": info["store_port"]}
    if info["local_size"]:
        values["LOCAL_WORLD_SIZE"] = info["local_size"]
    for name, value in values.items():
        environ.setdefault(name, str(value))
    return True


def _register() -> None:
    # Importing twice (or reloading) must not trip torch's "backend already exists" assertion.
    if getattr(dist.Backend, BACKEND.upper(), None) is not None:
        return
    if TORCH_MAJOR >= 2:
        # torch 2.x dispatches by device type to a Backend; ours serves CPU tensors and stages CUDA ones.
        dist.Backend.register_backend(BACKEND, create_process_group, devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(BACKEND, create_process_group)
    if getattr(sys.excepthook, "__name__", "") != _abort_on_uncaught.__name__:
        sys.excepthook = _abort_on_uncaught


_register()
adopt_launcher_environment()
