#include "array.hpp"

#include "common.hpp"

namespace rdmakit::python {
namespace {

bool is_torch_tensor(py::handle object) {
  const auto module = py::str(py::type::handle_of(object).attr("__module__")).cast<std::string>();
  return module.rfind("torch", 0) == 0 && py::hasattr(object, "data_ptr");
}

// torch.float32 -> "float32"
std::string torch_dtype_name(py::handle tensor) {
  auto text = py::str(tensor.attr("dtype")).cast<std::string>();
  return text.rfind("torch.", 0) == 0 ? text.substr(6) : text;
}

ArrayRef tensor_ref(py::handle tensor) {
  if (py::str(tensor.attr("device").attr("type")).cast<std::string>() != "cpu")
    raise(Errc::InvalidArgument, "only CPU tensors are supported here (the CUDA path is not built)");
  if (!tensor.attr("is_contiguous")().cast<bool>())
    raise(Errc::InvalidArgument, "the tensor is not contiguous (call .contiguous() first)");
  ArrayRef ref;
  ref.data = reinterpret_cast<void*>(tensor.attr("data_ptr")().cast<std::uintptr_t>());
  ref.count = tensor.attr("numel")().cast<std::size_t>();
  ref.itemsize = tensor.attr("element_size")().cast<std::size_t>();
  ref.dtype = torch_dtype_name(tensor);
  for (auto dim : tensor.attr("shape")) ref.shape.push_back(dim.cast<std::uint64_t>());
  ref.keep = py::reinterpret_borrow<py::object>(tensor);
  return ref;
}

ArrayRef buffer_ref(py::handle object, bool writable) {
  ArrayRef ref;
  ref.buffer = std::make_shared<HeldBuffer>(object, writable);
  ref.data = ref.buffer->data();
  auto array = py::module_::import("numpy").attr("asarray")(ref.buffer->owner());
  ref.itemsize = array.attr("itemsize").cast<std::size_t>();
  ref.count = array.attr("size").cast<std::size_t>();
  ref.dtype = py::str(array.attr("dtype").attr("name")).cast<std::string>();
  for (auto dim : array.attr("shape")) ref.shape.push_back(dim.cast<std::uint64_t>());
  if (ref.count * ref.itemsize != ref.buffer->size())
    raise(Errc::InvalidArgument, "the array's elements do not cover its buffer");
  return ref;
}

}  // namespace

ArrayRef array_ref(py::handle object, bool writable) {
  return is_torch_tensor(object) ? tensor_ref(object) : buffer_ref(object, writable);
}

}  // namespace rdmakit::python
