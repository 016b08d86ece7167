"""Registration of any buffer without copying, and what it keeps alive."""

import gc
import mmap
import weakref

import numpy as np
import pytest

import rdmakit
from rdmakit import Access

WRITE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def address_of(array):
    return array.__array_interface__["data"][0]


def test_numpy_array_is_registered_in_place(ctx):
    array = np.arange(1000, dtype=np.float64)
    region = ctx.register(array)
    assert region.address == address_of(array) and region.size == array.nbytes and len(region) == array.nbytes
    assert region.obj is array and region.descriptor.length == array.nbytes
    view = np.frombuffer(region.view(), dtype=np.float64)
    array[7] = 42.0
    assert view[7] == 42.0  # the view is the same memory


def test_bytearray_memoryview_and_mmap(ctx):
    buffer = bytearray(b"x" * 4096)
    region = ctx.register(buffer)
    with pytest.raises(BufferError):
        buffer.extend(b"more")  # registered: cannot be resized (the transport may be writing into it)
    region.close()
    buffer.extend(b"more")  # released by close()
    region = ctx.register(memoryview(buffer)[100:200])
    assert region.size == 100 and region.address == address_of(np.frombuffer(buffer, np.uint8)) + 100
    mapping = mmap.mmap(-1, 8192)
    with ctx.register(mapping) as mapped:
        assert mapped.size == 8192
        with pytest.raises(BufferError):
            mapping.close()
    mapping.close()


def test_torch_cpu_tensor_shares_its_storage(ctx):
    torch = pytest.importorskip("torch")
    tensor = torch.arange(256, dtype=torch.float32)
    region = ctx.register(tensor)
    assert region.address == tensor.data_ptr() and region.size == 1024 and region.obj is tensor
    with pytest.raises(rdmakit.InvalidArgumentError, match="contiguous"):
        ctx.register(tensor.view(16, 16).t())
    parameter = torch.nn.Parameter(torch.zeros(8))  # requires_grad: still registered in place
    assert ctx.register(parameter).address == parameter.data_ptr()


def test_read_only_buffer_is_refused_for_write_access(ctx):
    array = np.zeros(64, dtype=np.uint8)
    array.setflags(write=False)
    with pytest.raises(rdmakit.InvalidArgumentError, match="read-only"):
        ctx.register(array, WRITE)
    with pytest.raises(rdmakit.InvalidArgumentError, match="read-only"):
        ctx.register(b"immutable bytes", Access.LOCAL_WRITE)
    assert ctx.register(array, Access.REMOTE_READ).size == 64  # reading it is fine
    assert ctx.register(b"immutable bytes", Access.REMOTE_READ).size == 15


def test_non_contiguous_and_memoryless_objects_are_refused(ctx):
    with pytest.raises(rdmakit.InvalidArgumentError, match="contiguous"):
        ctx.register(np.zeros((8, 8))[:, 1])
    with pytest.raises(rdmakit.InvalidArgumentError, match="no memory"):
        ctx.register(object())
    with pytest.raises(rdmakit.InvalidArgumentError, match="empty"):
        ctx.register(bytearray())
    with pytest.raises(rdmakit.InvalidArgumentError, match="unknown bits"):
        ctx.register(bytearray(8), 99)


def test_region_keeps_its_object_alive_until_closed(ctx):
    array = np.zeros(4096, dtype=np.uint8)
    alive = weakref.ref(array)
    region = ctx.register(array)
    del array
    gc.collect()
    assert alive() is not None, "the registered array died while registered"
    region.close()
    gc.collect()
    assert alive() is None, "close() did not let go of the array"
    assert region.closed
    with pytest.raises(rdmakit.InvalidArgumentError, match="closed"):
        region.descriptor


def test_slices(ctx):
    region = ctx.register(bytearray(100))
    part = region[10:30]
    assert (part.offset, part.length, len(part)) == (10, 20, 20)
    assert region.slice(90).length == 10
    with pytest.raises(rdmakit.InvalidArgumentError, match="outside"):
        region.slice(90, 11)
    with pytest.raises(rdmakit.InvalidArgumentError):
        region[::2]


def test_allocated_memory_and_its_view_outlive_close(ctx):
    region = ctx.allocate(1 << 16)
    view = np.frombuffer(region.view(), dtype=np.uint8)
    assert view.size == 1 << 16 and not view.any()
    region.close()
    view[:] = 7  # still valid memory: the view holds it
    assert view.sum() == 7 << 16
