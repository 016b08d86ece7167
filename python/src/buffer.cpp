#include "buffer.hpp"

#include <string>

#include "common.hpp"

namespace rdmakit::python {
namespace {

bool is_torch_tensor_with_numpy(py::handle object) {
  const auto type = py::type::handle_of(object);
  const auto module = py::str(type.attr("__module__")).cast<std::string>();
  return module.rfind("torch", 0) == 0 && py::hasattr(object, "data_ptr") && py::hasattr(object, "numpy");
}

// A numpy view sharing the tensor's storage; refuses what would need a copy (GPU, non-contiguous).
py::object tensor_view(py::handle tensor) {
  if (py::str(tensor.attr("device").attr("type")).cast<std::string>() != "cpu")
    raise(Errc::InvalidArgument, "only CPU tensors can be registered (this one is on " +
                                     py::str(tensor.attr("device")).cast<std::string>() + ")");
  if (!tensor.attr("is_contiguous")().cast<bool>())
    raise(Errc::InvalidArgument, "the tensor is not contiguous: registering it would need a copy");
  auto view = tensor.attr("detach")().attr("numpy")();
  const auto tensor_address = tensor.attr("data_ptr")().cast<std::uintptr_t>();
  const auto view_address =
      view.attr("__array_interface__")["data"].cast<py::tuple>()[0].cast<std::uintptr_t>();
  if (tensor_address != view_address) raise(Errc::InvalidArgument, "the tensor's memory could not be shared");
  return view;
}

py::object exporter_of(py::handle object) {
  if (PyObject_CheckBuffer(object.ptr())) return py::reinterpret_borrow<py::object>(object);
  if (is_torch_tensor_with_numpy(object)) return tensor_view(object);
  if (py::hasattr(object, "__array_interface__"))  // wraps the memory; numpy never copies here
    return py::module_::import("numpy").attr("asarray")(object);
  raise(Errc::InvalidArgument, "a " + type_name_of(object) +
                                   " has no memory to register (it supports neither the buffer protocol "
                                   "nor __array_interface__)");
}

bool has_cuda_array_interface(py::handle object) { return py::hasattr(object, "__cuda_array_interface__"); }

}  // namespace

HeldBuffer::HeldBuffer(py::handle object, bool writable, Placement placement)
    : owner_(py::reinterpret_borrow<py::object>(object)) {
  if (has_cuda_array_interface(object)) {
    if (placement == Placement::HostOnly)
      raise(Errc::InvalidArgument,
            "a " + type_name_of(object) +
                " in CUDA device memory cannot be used here: only host memory is taken "
                "(copy it to the host first)");
    const auto memory = cuda_array_memory(object);
    if (writable && memory.readonly)
      raise(Errc::InvalidArgument,
            "the CUDA array is read-only, but the access asked for lets the transport write into it");
    data_ = memory.data, size_ = memory.size, readonly_ = memory.readonly, kind_ = MemoryKind::Cuda;
    return;
  }
  refuse_device_dlpack(object);
  exporter_ = exporter_of(object);
  const int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(exporter_.ptr(), &view_, flags) != 0) {
    // Say which rule was broken instead of the exporter's generic BufferError.
    PyErr_Clear();
    Py_buffer probe{};
    if (PyObject_GetBuffer(exporter_.ptr(), &probe, PyBUF_ANY_CONTIGUOUS) != 0) {
      PyErr_Clear();
      raise(Errc::InvalidArgument, "the buffer is not contiguous: registering it would need a copy");
    }
    PyBuffer_Release(&probe);
    raise(Errc::InvalidArgument,
          "the buffer is read-only, but the access asked for (LOCAL_WRITE, REMOTE_WRITE or REMOTE_ATOMIC) "
          "lets the transport write into it");
  }
  held_ = true;
  data_ = view_.buf, size_ = static_cast<std::size_t>(view_.len), readonly_ = view_.readonly != 0;
}

HeldBuffer::~HeldBuffer() { release(); }

void HeldBuffer::release() noexcept {
  if (!held_) return;
  held_ = false;
  PyBuffer_Release(&view_);
}

}  // namespace rdmakit::python
