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

Timeouts: each collective is bounded by the ``timeout`` given to ``init_process_group`` unless
``RDMAKIT_COLL_TIMEOUT_MS`` is set; waiting for ranks to arrive by ``RDMAKIT_BOOTSTRAP_TIMEOUT_MS``.
"""

from datetime import timedelta

import torch.distributed as dist

from ._rdmakit_torch import ProcessGroupRdmakit

__all__ = ["BACKEND", "ProcessGroupRdmakit", "create_process_group"]

#: The name to pass to ``torch.distributed.init_process_group``.
BACKEND = "rdmakit"


def create_process_group(store, rank: int, world_size: int, timeout: timedelta) -> ProcessGroupRdmakit:
    """The creator torch.distributed calls for ``backend="rdmakit"``: meets the other ranks through ``store``."""
    return ProcessGroupRdmakit(store, rank, world_size, timeout)


def _register() -> None:
    # Importing twice (or reloading) must not trip torch's "backend already exists" assertion.
    if getattr(dist.Backend, BACKEND.upper(), None) is None:
        dist.Backend.register_backend(BACKEND, create_process_group)


_register()
