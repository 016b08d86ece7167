"""The cases of test_cuda_memory.py, run in a process of their own: the library reads RDMAKIT_CUDA_RUNTIME and
RDMAKIT_CUDA_DRIVER (pointing at the fake CUDA runtime and driver, tests/fake_cudart) once, the first time it
needs CUDA, so they are set before rdmakit is imported, apart from the rest of the suite.

    cuda_worker.py <path of libfake_cudart.so>

Prints "PASS <case>" or "FAIL <case>: <traceback>" per case. The fake's device memory faults if the CPU
touches it (as a GPU's does): the cases fill and check it through fake_cudart_host_view.
"""

import ctypes
import os
import sys
import threading
import traceback

FAKE = sys.argv[1]
os.environ["RDMAKIT_CUDA_RUNTIME"] = FAKE
os.environ["RDMAKIT_CUDA_DRIVER"] = FAKE

import numpy as np  # noqa: E402

import rdmakit  # noqa: E402
from rdmakit import Access, xfer  # noqa: E402

# The same path the library dlopens: one library, one state (and the driver counts as loaded for Auto).
lib = ctypes.CDLL(FAKE)
lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
lib.cudaFree.argtypes = [ctypes.c_void_p]
lib.fake_cudart_host_view.argtypes = [ctypes.c_void_p]
lib.fake_cudart_host_view.restype = ctypes.c_void_p
lib.fake_cudart_reset(1)


class CudaArray:
    """Fake device memory exposing __cuda_array_interface__, as a CUDA tensor or CuPy array does."""

    def __init__(self, nbytes, readonly=False, strides=None, version=3, shape=None, typestr="|u1"):
        pointer = ctypes.c_void_p()
        assert lib.cudaMalloc(ctypes.byref(pointer), nbytes) == 0
        self.ptr, self.nbytes = pointer.value, nbytes
        self.interface = {"shape": shape or (nbytes,), "typestr": typestr, "data": (self.ptr, readonly),
                          "strides": strides, "version": version}
        if version >= 3:
            self.interface["stream"] = None

    @property
    def __cuda_array_interface__(self):
        return self.interface

    def host(self):
        """The fake's host view of the bytes (never the device address itself)."""
        view = lib.fake_cudart_host_view(self.ptr)
        assert view, "not device memory"
        return np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(view))

    def __del__(self):
        lib.cudaFree(self.ptr)


class Slice:
    """Bytes [start, stop) of a CudaArray, as array[start:stop] of a CUDA tensor exposes them."""

    def __init__(self, array, start, stop):
        self.array = array
        self.__cuda_array_interface__ = {"shape": (stop - start,), "typestr": "|u1", "strides": None,
                                         "data": (array.ptr + start, False), "version": 2}


class DlpackOnly:
    """An object in CUDA memory that speaks only DLPack."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("rdmakit must not consume it")


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)


def raises(kind, call, *words):
    try:
        call()
    except kind as error:
        for word in words:
            assert word in str(error), f"{word!r} not in {error}"
        return
    raise AssertionError(f"no {kind.__name__} raised")


def connect_pair(client_ctx, server_ctx):
    listener = server_ctx.listen()
    result = {}
    thread = threading.Thread(target=lambda: result.update(conn=client_ctx.connect(listener.address)))
    thread.start()
    server = listener.accept(timeout=10)
    thread.join()
    listener.close()
    return result["conn"], server


def case_region_reports_kind_and_path():
    with rdmakit.Context(transport="tcp") as ctx:
        gpu = CudaArray(1 << 16)
        region = ctx.register(gpu)
        assert (region.kind, region.path, region.address, region.size) == ("cuda", "staged", gpu.ptr, 1 << 16)
        assert region.obj is gpu
        raises(rdmakit.InvalidArgumentError, region.view, "CUDA device memory")
        host = ctx.register(np.zeros(4096, np.uint8))
        assert (host.kind, host.path) == ("host", "host")


def case_tcp_write_and_read_device_to_device():
    size = (1 << 20) + 4096 * 3
    with rdmakit.Context(transport="tcp") as a, rdmakit.Context(transport="tcp") as b:
        client, server = connect_pair(a, b)
        source, target, back = CudaArray(size), CudaArray(size), CudaArray(size)
        source.host()[:] = pattern(1, size)
        target.host()[:] = 0
        back.host()[:] = 0
        remote = b.register(target)
        assert client.wait(client.write(a.register(source), remote.descriptor), timeout=10).ok
        assert np.array_equal(target.host(), pattern(1, size))
        assert client.wait(client.read(a.register(back), remote.descriptor), timeout=10).ok
        assert np.array_equal(back.host(), pattern(1, size))
        client.close()
        server.close()


def case_bad_cuda_arrays_are_refused_naming_the_rule():
    with rdmakit.Context(transport="tcp") as ctx:
        strided = CudaArray(4096, shape=(16, 16), strides=(512, 1))
        raises(rdmakit.InvalidArgumentError, lambda: ctx.register(strided), "not contiguous")
        # Explicit strides that are the contiguous ones are fine.
        assert ctx.register(CudaArray(4096, shape=(16, 64), typestr="<f4", strides=(256, 4))).size == 4096
        raises(rdmakit.InvalidArgumentError, lambda: ctx.register(CudaArray(4096, version=1)), "version 1")
        raises(rdmakit.InvalidArgumentError, lambda: ctx.register(CudaArray(4096, readonly=True)), "read-only")
        assert ctx.register(CudaArray(4096, readonly=True), Access.REMOTE_READ).kind == "cuda"
        raises(TypeError, lambda: ctx.register(DlpackOnly()), "DLPack", "__cuda_array_interface__")
        # DLPack and __cuda_array_interface__ both (a CUDA torch tensor): taken through the interface.
        both = CudaArray(4096)
        both.__dlpack_device__ = lambda: (2, 0)
        assert ctx.register(both).kind == "cuda"
        # An interface whose pointer is host memory is refused by the library, never registered as device.
        host = np.zeros(4096, np.uint8)
        liar = Slice.__new__(Slice)
        liar.__cuda_array_interface__ = {"shape": (4096,), "typestr": "|u1", "data": (host.ctypes.data, False),
                                         "version": 3, "strides": None}
        raises(rdmakit.Error, lambda: ctx.register(liar), "not device memory")


def case_shm_takes_device_memory_or_refuses_naming_itself():
    with rdmakit.Context(transport="shm") as ctx:
        gpu = CudaArray(1 << 16)
        try:
            region = ctx.register(gpu)
        except rdmakit.NotSupportedError as error:
            assert "shm" in str(error), str(error)
            return
        assert region.kind == "cuda" and region.path != "host"


def case_xfer_kv_blocks_vram_to_vram_over_tcp():
    sizes = [(4 + (i * 37) % 61) * 4096 for i in range(32)]  # 16-256 KiB, mixed
    offsets = np.cumsum([0] + sizes)
    total = int(offsets[-1])
    with xfer.serve_metadata() as server:
        with xfer.Engine(xfer.open_metadata(server.url), transports=["tcp"]) as owner, \
                xfer.Engine(xfer.open_metadata(server.url), transports=["tcp"]) as client:
            pool, source, sink = CudaArray(total), CudaArray(total), CudaArray(total)
            pool.host()[:] = 0
            source.host()[:] = pattern(7, total)
            sink.host()[:] = 0
            owner.publish("kv", pool)
            client.register_local(source)
            client.register_local(sink)
            kv = client.open_segment("kv")
            blocks = list(zip(offsets[:-1], offsets[1:]))
            # Block i goes to the slot of block n-1-i: every block lands somewhere else than it came from.
            slots = [int(offsets[-1] - b) for a, b in blocks]
            writes = [(xfer.WRITE, Slice(source, a, b), kv, slot) for (a, b), slot in zip(blocks, slots)]
            assert client.submit(writes).wait(timeout=30) == [None] * len(blocks)
            for (a, b), slot in zip(blocks, slots):
                assert np.array_equal(pool.host()[slot:slot + b - a], pattern(7, total)[a:b])
            reads = [(xfer.READ, Slice(sink, a, b), kv, slot) for (a, b), slot in zip(blocks, slots)]
            assert client.submit(reads).wait(timeout=30) == [None] * len(blocks)
            assert np.array_equal(sink.host(), pattern(7, total))
            client.unregister_local(source)


def main():
    failed = 0
    for name, case in sorted(globals().items()):
        if not name.startswith("case_"):
            continue
        try:
            case()
            print("PASS", name[5:], flush=True)
        except Exception:  # reported to the test of the same name
            failed += 1
            print("FAIL", name[5:] + ":", traceback.format_exc().replace("\n", "\n  "), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
