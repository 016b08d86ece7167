"""The transfer engine from Python: named segments and batches of one-sided READs and WRITEs between processes.

::

    import numpy as np
    from rdmakit import xfer

    server = xfer.serve_metadata()                       # or a redis:// / etcd:// URL users already run
    store = xfer.open_metadata(server.url)

    # The owner (e.g. a prefill process) publishes memory under a name, without copying:
    owner = xfer.Engine(store, name="prefill")
    kv_pool = np.zeros(64 << 20, dtype=np.uint8)
    owner.publish("kv", kv_pool)                         # or owner.allocate_segment("kv", size) -> array

    # A peer (e.g. a decode process) opens it by name and moves bytes between it and its own memory:
    peer = xfer.Engine(xfer.open_metadata(server.url), name="decode")
    local = torch.empty(1 << 20, dtype=torch.uint8)      # numpy arrays and CPU tensors alike
    peer.register_local(local)
    kv = peer.open_segment("kv")                         # one metadata lookup, then cached
    batch = peer.submit([(xfer.READ, local[:4096], kv, 0), (xfer.WRITE, local[4096:8192], kv, 8192)])
    batch.wait()                                         # GIL released; raises naming every failed request

A request is ``(op, local, segment, offset[, length])``: ``local`` is memory registered with
:meth:`Engine.register_local` (or published / allocated by this engine) or any slice of it; ``length``
defaults to the size of ``local``. Each request of a batch succeeds or fails on its own: ``batch.wait()`` raises
when any failed (the class of the first failure; the message names every failed request with its code and
status, and ``failures`` maps their indexes to their errors), and ``batch.wait(check=False)`` returns the
outcomes instead (``None``, or the :class:`rdmakit.Error` that says why). A bad request refuses the whole batch
with :class:`rdmakit.InvalidArgumentError` naming it.

The array ``allocate_segment`` returns (and every view of it) keeps the segment's memory: unpublishing the
name does not free it while an array refers to it.

The weights broadcast (one owner's region to N receivers through a pipelined chain) works on core contexts
and regions: :func:`broadcast_send` and :func:`broadcast_receive`.
"""

from ._rdmakit import (  # noqa: F401  (re-exported)
    Batch, Engine, MetadataServer, MetadataStore, PreparedRequests, Segment, XferOp as Op, broadcast_receive,
    broadcast_send, open_metadata, serve_metadata,
)

READ = Op.READ  #: a request that copies segment bytes into local memory
WRITE = Op.WRITE  #: a request that copies local memory into the segment

__all__ = [
    "Batch", "Engine", "MetadataServer", "MetadataStore", "Op", "PreparedRequests", "READ", "Segment", "WRITE",
    "broadcast_receive", "broadcast_send", "open_metadata", "serve_metadata",
]
