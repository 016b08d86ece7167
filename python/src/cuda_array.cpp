// Device memory from Python objects: __cuda_array_interface__ (Numba's protocol, versions 2 and 3, which
// CUDA torch tensors, CuPy and Numba arrays expose) read zero-copy, and DLPack objects in device memory
// refused with the protocol named. Only the address and extent are taken here: the library checks that the
// address really is device memory (MemoryKind::Cuda), so an object that lies gets an error, not a crash.
// A version-3 "stream" is not synchronized on: registering touches no bytes, and a transfer's caller orders
// it after the producer's work, as with any other CUDA consumer.
#include <string>

#include "buffer.hpp"
#include "common.hpp"

namespace rdmakit::python {
namespace {

constexpr int kDlpackCpu = 1;   // DLDeviceType kDLCPU
constexpr int kDlpackCuda = 2;  // kDLCUDA

std::size_t itemsize_of(const std::string& typestr) {
  // "<f4", "|u1", ">i8": byte order, kind, bytes per element.
  std::size_t size = 0;
  if (typestr.size() >= 3) {
    try {
      size = std::stoul(typestr.substr(2));
    } catch (const std::exception&) {
      size = 0;
    }
  }
  if (size == 0)
    raise(Errc::InvalidArgument, "__cuda_array_interface__: typestr '" + typestr + "' is not valid");
  return size;
}

// The array's bytes, checking that explicit strides (if any) are the C-contiguous ones: anything else has
// gaps or overlaps that one registered range cannot describe.
std::size_t contiguous_size(const py::dict& cai, std::size_t itemsize) {
  const auto shape = cai["shape"].cast<py::tuple>();
  std::size_t count = 1;
  for (auto dim : shape) count *= dim.cast<std::size_t>();
  if (!cai.contains("strides") || cai["strides"].is_none() || count == 0) return count * itemsize;
  const auto strides = cai["strides"].cast<py::tuple>();
  if (strides.size() != shape.size())
    raise(Errc::InvalidArgument, "__cuda_array_interface__: strides and shape differ in length");
  std::size_t expected = itemsize;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto dim = shape[d].cast<std::size_t>();
    if (dim != 1 && strides[d].cast<py::ssize_t>() != static_cast<py::ssize_t>(expected))
      raise(Errc::InvalidArgument, "the CUDA array is not contiguous (strides " +
                                       py::repr(strides).cast<std::string>() +
                                       "): registering it would need a copy (make it contiguous first)");
    expected *= dim;
  }
  return count * itemsize;
}

}  // namespace

std::string type_name_of(py::handle object) {
  return py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>();
}

CudaArrayMemory cuda_array_memory(py::handle object) {
  auto interface = object.attr("__cuda_array_interface__");
  if (!py::isinstance<py::dict>(interface))
    raise(Errc::InvalidArgument, "__cuda_array_interface__ of a " + type_name_of(object) + " is not a dict");
  const auto cai = interface.cast<py::dict>();
  try {
    const auto version = cai.contains("version") ? cai["version"].cast<int>() : 0;
    if (version < 2)
      raise(Errc::InvalidArgument, "__cuda_array_interface__ version " + std::to_string(version) +
                                       " is not supported (versions 2 and 3 are)");
    if (cai.contains("mask") && !cai["mask"].is_none())
      raise(Errc::InvalidArgument, "a masked CUDA array cannot be registered");
    const auto data = cai["data"].cast<py::tuple>();
    if (data.size() != 2)
      raise(Errc::InvalidArgument, "__cuda_array_interface__: data is not (ptr, readonly)");
    CudaArrayMemory memory;
    memory.data = reinterpret_cast<void*>(data[0].cast<std::uintptr_t>());
    memory.readonly = data[1].cast<bool>();
    memory.size = contiguous_size(cai, itemsize_of(cai["typestr"].cast<std::string>()));
    if (memory.size == 0 || memory.data == nullptr)
      raise(Errc::InvalidArgument, "the CUDA array is empty: nothing to register");
    return memory;
  } catch (const py::cast_error&) {
    raise(Errc::InvalidArgument, "__cuda_array_interface__ of a " + type_name_of(object) +
                                     " lacks data, shape or typestr of the right types");
  } catch (const py::error_already_set& e) {
    if (!e.matches(PyExc_KeyError)) throw;
    raise(Errc::InvalidArgument,
          "__cuda_array_interface__ of a " + type_name_of(object) + " lacks data, shape or typestr");
  }
}

void refuse_device_dlpack(py::handle object) {
  if (PyObject_CheckBuffer(object.ptr()) || !py::hasattr(object, "__dlpack_device__")) return;
  auto device = object.attr("__dlpack_device__")();
  if (!py::isinstance<py::tuple>(device) || py::len(device) != 2) return;
  const auto type = device.cast<py::tuple>()[0].cast<int>();
  if (type == kDlpackCpu) return;
  throw py::type_error(
      "a " + type_name_of(object) + " in " + (type == kDlpackCuda ? std::string("CUDA") : "non-CPU") +
      " device memory (DLPack device type " + std::to_string(type) +
      ") exposes it only through DLPack (__dlpack__), which rdmakit does not take: rdmakit registers device "
      "memory through __cuda_array_interface__ (e.g. torch.from_dlpack(obj) or cupy.from_dlpack(obj) give an "
      "object that has it)");
}

}  // namespace rdmakit::python
