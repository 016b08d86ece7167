// Zero-copy access to the memory of a Python object: the buffer protocol (numpy arrays, bytearray,
// memoryview, mmap, ...), PyTorch CPU tensors (through tensor.detach().numpy(), which shares the
// tensor's storage) and objects with __array_interface__. Holding the Py_buffer keeps the object alive
// and, for bytearray and mmap, stops it from being resized or closed while registered.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>

namespace rdmakit::python {

namespace py = pybind11;

class HeldBuffer {
 public:
  // Acquires `object`'s memory, writable when `writable`. Raises rdmakit.InvalidArgumentError for a
  // read-only buffer when write access is asked, a non-contiguous one, or an object without memory.
  HeldBuffer(py::handle object, bool writable);
  ~HeldBuffer();
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;

  void* data() const noexcept { return view_.buf; }
  std::size_t size() const noexcept { return static_cast<std::size_t>(view_.len); }
  bool readonly() const noexcept { return view_.readonly != 0; }
  // The object the memory belongs to (for a tensor: the tensor, not the numpy view of it).
  py::object owner() const { return owner_; }
  // Gives the buffer back (the object may then be resized or freed). Idempotent. Needs the GIL.
  void release() noexcept;

 private:
  py::object owner_;
  py::object exporter_;  // what the buffer was taken from (the owner, or a numpy view of a tensor)
  Py_buffer view_{};
  bool held_ = false;
};

}  // namespace rdmakit::python
