// rdmakit::Error -> rdmakit.errors.<Class>(message, errc=..., status=..., errno=...). The classes are
// plain Python (python/rdmakit/errors.py) so they carry docstrings and can be caught without the
// extension; this file only chooses the class, by Errc and, for failed operations, by Status.
#include <pybind11/stl.h>

#include "common.hpp"
#include "rdmakit/completion.hpp"

namespace rdmakit::python {
namespace {

const char* class_for(const Error& error) {
  switch (error.code()) {
    case Errc::InvalidArgument:
      return "InvalidArgumentError";
    case Errc::NotSupported:
      return "NotSupportedError";
    case Errc::NotFound:
      return "NotFoundError";
    case Errc::Unavailable:
      return "UnavailableError";
    case Errc::ConnectionRefused:
      return "ConnectionRefusedError";
    case Errc::ConnectionBroken:
      return "ConnectionBrokenError";
    case Errc::StaleDescriptor:
      return "StaleDescriptorError";
    case Errc::Timeout:
      return "TimeoutError";
    case Errc::ResourceExhausted:
      return "ResourceExhaustedError";
    case Errc::ProtocolError:
      return "ProtocolError";
    case Errc::SystemError:
      return "SystemCallError";
    case Errc::TransportFailure:
      return error.status() == Status::RemoteAccess ? "RemoteAccessError" : "OperationError";
  }
  return "Error";
}

void set_python_error(const Error& error) {
  auto exception = exception_for(error);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
}

}  // namespace

py::object exception_for(const Error& error) {
  auto cls = py::module_::import("rdmakit.errors").attr(class_for(error));
  return cls(error.describe(), py::arg("errc") = error.code(), py::arg("status") = error.status(),
             py::arg("errno") = error.sys_errno());
}

namespace {

// `value` as a Python int (through __index__), or an error naming `name`.
py::int_ index_of(py::handle value, const std::string& name, const std::string& range) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
    raise(Errc::InvalidArgument,
          name + " must be an integer in " + range + ", not " + py::repr(value).cast<std::string>() + " (" +
              py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>() + ")");
  return py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
}

[[noreturn]] void out_of_range(const py::int_& value, const std::string& name, const std::string& range) {
  raise(Errc::InvalidArgument,
        name + " must be in " + range + ", not " + py::repr(value).cast<std::string>());
}

}  // namespace

std::uint64_t checked_uint(py::handle value, const std::string& name, std::uint64_t max) {
  const auto range = "[0, " + std::to_string(max) + "]";
  const auto number = index_of(value, name, range);
  if (number < py::int_(0) || number > py::int_(max)) out_of_range(number, name, range);
  return number.cast<std::uint64_t>();
}

std::int64_t checked_int(py::handle value, const std::string& name, std::int64_t min, std::int64_t max) {
  const auto range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  const auto number = index_of(value, name, range);
  if (number < py::int_(min) || number > py::int_(max)) out_of_range(number, name, range);
  return number.cast<std::int64_t>();
}

std::chrono::nanoseconds to_timeout(const std::optional<double>& seconds, std::chrono::nanoseconds fallback) {
  if (!seconds) return fallback;
  if (!(*seconds >= 0)) raise(Errc::InvalidArgument, "timeout must be >= 0 seconds");
  if (*seconds > 1e9) return fallback;  // "forever" within reason: no overflow of steady_clock
  return std::chrono::nanoseconds(static_cast<std::int64_t>(*seconds * 1e9));
}

void bind_errors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const RaisedError& raised) {
      set_python_error(raised.error);
    }
  });
  m.def(
      "_raise_for_test",
      [](Errc code, Status status, const std::string& message) { raise(Error(code, message, 0, status)); },
      "Raises the exception the bindings raise for this Errc/Status (for the tests of the mapping).");
}

}  // namespace rdmakit::python
