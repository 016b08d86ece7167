"""The ``rdmakit`` backend of :mod:`torch.distributed`.

Importing this module registers the backend, after which existing scripts only change the backend name::

    import torch.distributed as dist
    import rdmakit.distributed  # registers "rdmakit"
    dist.init_process_group("rdmakit")  # launched by python3 -m torch.distributed.run, or mpirun

Collectives (allreduce, also bucketed and coalesced as DDP issues them; broadcast; allgather; reduce_scatter;
all_to_all; barrier; reduce, gather, scatter) and send/recv run on rdmakit's communicator: shared memory
between the ranks of one host, the network transport (``RDMAKIT_TRANSPORT``, tcp by default) between hosts.
CPU tensors only. Reductions take float32, float64, float16, bfloat16, int32, int64 and uint8 and the ops
SUM, AVG, PRODUCT, MIN and MAX; data movement takes every dtype. Non-contiguous tensors are staged through a
contiguous copy. Messages between two ranks match in the order they were issued, and their tags must agree.

Launchers: ``torch.distributed.run`` sets torch's ``env://`` variables itself. Under ``mpirun`` (Open MPI) or
``srun`` (Slurm), importing this module fills RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT from the launcher's own variables (the same rules as rdmakit's C++ ``detect_launch()``: rank 0's
host, a port derived from the job id), unless RANK is already set; so ``init_process_group("rdmakit")`` works
unchanged there too.

Timeouts: each collective is bounded by the ``timeout`` given to ``init_process_group`` unless
``RDMAKIT_COLL_TIMEOUT_MS`` is set; waiting for ranks to arrive by ``RDMAKIT_BOOTSTRAP_TIMEOUT_MS``.
"""

import os
from datetime import timedelta

import torch.distributed as dist

from ._rdmakit_torch import ProcessGroupRdmakit, detect_launch

__all__ = ["BACKEND", "ProcessGroupRdmakit", "adopt_launcher_environment", "create_process_group", "detect_launch"]

#: The name to pass to ``torch.distributed.init_process_group``.
BACKEND = "rdmakit"


def create_process_group(store, rank: int, world_size: int, timeout: timedelta) -> ProcessGroupRdmakit:
    """The creator torch.distributed calls for ``backend="rdmakit"``: meets the other ranks through ``store``."""
    return ProcessGroupRdmakit(store, rank, world_size, timeout)


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
    if getattr(dist.Backend, BACKEND.upper(), None) is None:
        dist.Backend.register_backend(BACKEND, create_process_group)


_register()
adopt_launcher_environment()
