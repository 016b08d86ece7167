#include "rdmakit/error.hpp"

#include <cstring>

namespace rdmakit {

std::string_view to_string(Status status) noexcept {
  switch (status) {
    case Status::Success:
      return "success";
    case Status::LocalLength:
      return "local length error";
    case Status::LocalProtection:
      return "local protection error";
    case Status::LocalQpOperation:
      return "local QP operation error";
    case Status::RemoteAccess:
      return "remote access error";
    case Status::RemoteInvalidRequest:
      return "remote invalid request error";
    case Status::RemoteOperation:
      return "remote operation error";
    case Status::RnrRetryExceeded:
      return "receiver-not-ready retry exceeded";
    case Status::TransportRetryExceeded:
      return "transport retry exceeded";
    case Status::Flushed:
      return "flushed";
    case Status::GeneralError:
      return "general error";
  }
  return "unknown status";
}

std::string_view to_string(Errc code) noexcept {
  switch (code) {
    case Errc::InvalidArgument:
      return "invalid argument";
    case Errc::NotSupported:
      return "not supported";
    case Errc::NotFound:
      return "not found";
    case Errc::Unavailable:
      return "unavailable";
    case Errc::ConnectionRefused:
      return "connection refused";
    case Errc::ConnectionBroken:
      return "connection broken";
    case Errc::StaleDescriptor:
      return "stale descriptor";
    case Errc::Timeout:
      return "timeout";
    case Errc::ResourceExhausted:
      return "resource exhausted";
    case Errc::ProtocolError:
      return "protocol error";
    case Errc::SystemError:
      return "system error";
    case Errc::TransportFailure:
      return "transport failure";
  }
  return "unknown error";
}

std::string Error::describe() const { return std::string(to_string(code_)) + ": " + message_; }

std::unexpected<Error> fail_errno(std::string_view what, int sys_errno) {
  return std::unexpected(
      Error(Errc::SystemError, std::string(what) + ": " + std::strerror(sys_errno), sys_errno));
}

}  // namespace rdmakit
