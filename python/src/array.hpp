// An array argument of the collectives and the checkpoint engine: a numpy array or a CPU torch tensor
// (any dtype the C++ side knows, bfloat16 included), taken without copying and held alive.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "buffer.hpp"

namespace rdmakit::python {

namespace py = pybind11;

struct ArrayRef {
  void* data = nullptr;
  std::size_t count = 0;     // elements
  std::size_t itemsize = 0;  // bytes per element
  std::string dtype;  // numpy-style name: float32, float64, float16, bfloat16, int8..int64, uint8..uint64
  std::vector<std::uint64_t> shape;
  std::shared_ptr<HeldBuffer> buffer;  // numpy and other buffer-protocol arrays
  py::object keep;                     // torch tensors: the tensor itself

  std::size_t bytes() const noexcept { return count * itemsize; }
};

// Raises rdmakit.InvalidArgumentError for what cannot be used in place (non-contiguous, GPU, read-only
// when `writable`, an unknown dtype).
ArrayRef array_ref(py::handle object, bool writable);

}  // namespace rdmakit::python
