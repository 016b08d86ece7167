"""rdmakit: zero-copy RDMA data movement (verbs, tcp, shm) from Python.

A short tour::

    import numpy as np, rdmakit
    with rdmakit.Context(transport="tcp") as ctx:
        array = np.zeros(1 << 20, dtype=np.uint8)
        region = ctx.register(array)                 # no copy; keeps `array` alive
        descriptor = bytes(region.descriptor)        # 48 bytes, send them to the peer
        # peer: conn = ctx.connect(address); conn.wait(conn.write(local, RemoteRegion.from_bytes(d)))

Collectives: :class:`Communicator`; checkpoints: :mod:`rdmakit.ckpt`; the torch.distributed backend:
``import rdmakit.distributed`` (imports torch; this module does not).
"""

import enum as _enum

from . import errors
from ._rdmakit import (  # noqa: F401  (re-exported)
    Completion, CompletionQueue, Communicator, Connection, Context, Errc, Listener, Opcode, ReduceOp,
    Region, RemoteAddress, RemoteRegion, Slice, Status, WaitMode, Work, WorkRequest, describe_options,
)
from .errors import *  # noqa: F401,F403

__version__ = "0.1.0"


class Access(_enum.IntFlag):
    """Access rights of a registered region (the bits of ibv_access_flags)."""

    NONE = 0
    LOCAL_WRITE = 1  #: READ results, atomic results and receives may land here
    REMOTE_WRITE = 2  #: peers may WRITE into it
    REMOTE_READ = 4  #: peers may READ it
    REMOTE_ATOMIC = 8  #: peers may run atomics on it
    ALL = 15


__all__ = [
    "Access", "Completion", "CompletionQueue", "Communicator", "Connection", "Context", "Errc", "Listener",
    "Opcode", "ReduceOp", "Region", "RemoteAddress", "RemoteRegion", "Slice", "Status", "WaitMode", "Work",
    "WorkRequest", "describe_options", "errors",
] + errors.__all__
