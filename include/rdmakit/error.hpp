// Errors and completion statuses.
//
// Two kinds of failure exist, as in verbs:
//  * a call that cannot be carried out returns std::unexpected(Error) at once (ibv_post_send's errno);
//  * an operation that was accepted but failed reports a Status in its Completion (ibv_wc_status).
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

#include "rdmakit/export.hpp"

namespace rdmakit {

// Completion statuses, named after ibv_wc_status and obeying the same rules (docs/architecture.md).
enum class Status : std::uint8_t {
  Success = 0,
  LocalLength,             // IBV_WC_LOC_LEN_ERR: a receive buffer too small, a bad local length
  LocalProtection,         // IBV_WC_LOC_PROT_ERR: a local segment outside its region or missing LocalWrite
  LocalQpOperation,        // IBV_WC_LOC_QP_OP_ERR: the local connection could not carry the operation
  RemoteAccess,            // IBV_WC_REM_ACCESS_ERR: bad remote key, out of bounds, or a right missing
  RemoteInvalidRequest,    // IBV_WC_REM_INV_REQ_ERR: misaligned atomic, SEND longer than the posted receive
  RemoteOperation,         // IBV_WC_REM_OP_ERR: the responder failed to complete the operation
  RnrRetryExceeded,        // IBV_WC_RNR_RETRY_EXC_ERR: SEND with no posted receive for too long
  TransportRetryExceeded,  // IBV_WC_RETRY_EXC_ERR: the peer stopped answering (dead, hung, unreachable)
  Flushed,                 // IBV_WC_WR_FLUSH_ERR: posted behind a failure, or the connection was closed
  GeneralError,            // IBV_WC_GENERAL_ERR and anything verbs reports that has no better name
};

RDMAKIT_API std::string_view to_string(Status status) noexcept;

// Why a call failed.
enum class Errc : std::uint8_t {
  InvalidArgument = 1,  // the caller passed something malformed; the message names it
  NotSupported,         // the transport cannot do this (see Capabilities)
  NotFound,             // no such device, transport, region, ...
  Unavailable,          // a library or device that is needed is missing
  ConnectionRefused,    // nobody listens there, or the handshake was rejected
  ConnectionBroken,     // the connection failed earlier (sticky) or was closed
  StaleDescriptor,      // a remote descriptor from another process or an earlier life of the peer
  Timeout,              // a bounded wait ran out
  ResourceExhausted,    // a queue is full, memory could not be allocated or pinned
  ProtocolError,        // the peer sent bytes that break the protocol
  SystemError,          // a system call failed; the message carries errno's text
  TransportFailure,     // an operation completed with an error Status (status() tells which)
};

RDMAKIT_API std::string_view to_string(Errc code) noexcept;

class RDMAKIT_API Error {
 public:
  Error(Errc code, std::string message, int sys_errno = 0, Status status = Status::Success)
      : code_(code), status_(status), sys_errno_(sys_errno), message_(std::move(message)) {}

  Errc code() const noexcept { return code_; }
  // For TransportFailure: the completion status behind it.
  Status status() const noexcept { return status_; }
  int sys_errno() const noexcept { return sys_errno_; }
  const std::string& message() const noexcept { return message_; }
  // "<code>: <message>", for logs and exceptions.
  std::string describe() const;

 private:
  Errc code_;
  Status status_;
  int sys_errno_;
  std::string message_;
};

template <typename T>
using Result = std::expected<T, Error>;

// Shorthands that keep call sites short: `return fail(Errc::InvalidArgument, "length is 0");`
inline std::unexpected<Error> fail(Errc code, std::string message) {
  return std::unexpected(Error(code, std::move(message)));
}
// A system call failure carrying errno's text after `what`.
RDMAKIT_API std::unexpected<Error> fail_errno(std::string_view what, int sys_errno);

}  // namespace rdmakit
