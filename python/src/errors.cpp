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
