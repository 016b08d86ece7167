#include "transport/shm/records.hpp"

#include <atomic>

namespace rdmakit::shm {

AtomicCall snapshot(const AtomicRequest& request) noexcept {
  // Volatile reads: exactly one load of each field, which the compiler may not repeat later.
  const volatile AtomicRequest& shared = request;
  return AtomicCall{.rkey = shared.rkey,
                    .opcode = shared.opcode,
                    .addr = shared.addr,
                    .compare_add = shared.compare_add,
                    .swap = shared.swap};
}

Status validate_atomic(const AtomicCall& call) noexcept {
  bool known = call.opcode == static_cast<std::uint64_t>(Opcode::FetchAdd) ||
               call.opcode == static_cast<std::uint64_t>(Opcode::CompareSwap);
  if (!known || call.addr % 8 != 0) return Status::RemoteInvalidRequest;
  return Status::Success;
}

std::optional<Completion> decode_recv_done(const RecvDone& done, const PostedReceive& posted,
                                           std::uint32_t connection) noexcept {
  if (done.status > static_cast<std::uint8_t>(Status::GeneralError) || done.has_imm > 1) return std::nullopt;
  auto opcode = static_cast<Opcode>(done.opcode);
  if (opcode != Opcode::Recv && opcode != Opcode::RecvWriteImm) return std::nullopt;
  // A SEND fills the receive's segments; a WRITE-with-immediate's length is that of the WRITE.
  if (opcode == Opcode::Recv && done.bytes > posted.capacity) return std::nullopt;
  return Completion{.id = posted.id,
                    .status = static_cast<Status>(done.status),
                    .opcode = opcode,
                    .has_imm = done.has_imm != 0,
                    .bytes = done.bytes,
                    .imm = done.imm,
                    .connection = connection};
}

}  // namespace rdmakit::shm
