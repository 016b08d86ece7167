// Zero-copy access to the memory of a Python object: the buffer protocol (numpy arrays, bytearray,
// memoryview, mmap, ...), PyTorch CPU tensors (through tensor.detach().numpy(), which shares the
// tensor's storage) and objects with __array_interface__. Holding the Py_buffer keeps the object alive
// and, for bytearray and mmap, stops it from being resized or closed while registered.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>

#include "rdmakit/memory.hpp"

namespace rdmakit::python {

namespace py = pybind11;

// Where the memory of an object may live: device memory is accepted only where the CPU never touches it
// (registration, transfer-engine requests); everything else (collectives, views) takes host memory only.
enum class Placement { HostOnly, HostOrDevice };

class HeldBuffer {
 public:
  // Acquires `object`'s memory, writable when `writable`. Raises rdmakit.InvalidArgumentError for a
  // read-only buffer when write access is asked, a non-contiguous one, or an object without memory.
  // With Placement::HostOrDevice, an object exposing __cuda_array_interface__ (CUDA tensors, CuPy arrays,
  // Numba device arrays) is taken zero-copy as CUDA device memory (cuda_array.cpp); a DLPack object in
  // device memory without that interface raises TypeError naming the protocol.
  HeldBuffer(py::handle object, bool writable, Placement placement = Placement::HostOnly);
  ~HeldBuffer();
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool readonly() const noexcept { return readonly_; }
  // The kind to register it as: Cuda for memory from __cuda_array_interface__ (the library checks that it
  // is), else Auto, as before: the library detects device memory that a host protocol wrongly exposes.
  MemoryKind kind() const noexcept { return kind_; }
  // The object the memory belongs to (for a tensor: the tensor, not the numpy view of it).
  py::object owner() const { return owner_; }
  // Gives the buffer back (the object may then be resized or freed). Idempotent. Needs the GIL.
  void release() noexcept;

 private:
  py::object owner_;
  py::object exporter_;  // what the buffer was taken from (the owner, or a numpy view of a tensor)
  Py_buffer view_{};
  bool held_ = false;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool readonly_ = false;
  MemoryKind kind_ = MemoryKind::Auto;
};

// The memory an object exposes through __cuda_array_interface__ (versions 2 and 3): its device address,
// bytes and read-only flag. Refuses strided (non-contiguous) and masked arrays, naming the rule.
struct CudaArrayMemory {
  void* data = nullptr;
  std::size_t size = 0;
  bool readonly = false;
};
CudaArrayMemory cuda_array_memory(py::handle object);
std::string type_name_of(py::handle object);  // the name of its type, for messages
// Raises the error for `object` if it is a DLPack object in non-CPU memory (__dlpack_device__): a TypeError
// naming the protocol rdmakit takes device memory through. Returns otherwise.
void refuse_device_dlpack(py::handle object);

}  // namespace rdmakit::python
