#include "core/rc_check.hpp"

#include <string>

namespace rdmakit {
namespace {

bool is_atomic(Opcode opcode) noexcept { return opcode == Opcode::CompareSwap || opcode == Opcode::FetchAdd; }

// The message prefix of an error ("post request 2"), built only when there is an error to report: this
// check runs on every post, and formatting it eagerly was 40 % of an 8-byte shm WRITE's instructions.
std::string where_segments(std::string_view what, std::size_t index) {
  return std::string(what) + (index == SIZE_MAX ? "" : " request " + std::to_string(index));
}

Result<void> check_segments(std::string_view what, std::size_t index, std::span<const Segment> segments,
                            const Capabilities& caps) {
  if (segments.size() > caps.max_sge)
    return fail(Errc::InvalidArgument, where_segments(what, index) + ": " + std::to_string(segments.size()) +
                                           " scatter-gather entries, max_sge is " +
                                           std::to_string(caps.max_sge));
  std::uint64_t total = 0;
  for (const Segment& segment : segments) total += segment.length;
  if (caps.max_message_size != 0 && total > caps.max_message_size)
    return fail(Errc::InvalidArgument, where_segments(what, index) + ": " + std::to_string(total) +
                                           " bytes exceed the maximum message size of " +
                                           std::to_string(caps.max_message_size));
  return {};
}

Result<void> check_request(const WorkRequest& request, std::size_t index, const Capabilities& caps,
                           std::uint64_t peer_epoch) {
  const auto where = [index] { return "post: request " + std::to_string(index); };
  switch (request.opcode) {
    case Opcode::Write:
    case Opcode::WriteImm:
    case Opcode::Read:
    case Opcode::CompareSwap:
    case Opcode::FetchAdd:
    case Opcode::Send:
      break;
    case Opcode::Recv:
    case Opcode::RecvWriteImm:
      return fail(Errc::InvalidArgument, where() + ": opcode " + std::string(to_string(request.opcode)) +
                                             " is posted with post_recv()");
    default:
      return fail(Errc::InvalidArgument,
                  where() + ": unknown opcode " + std::to_string(static_cast<int>(request.opcode)));
  }
  if (auto ok = check_segments("post", index, request.local, caps); !ok) return ok;
  if (is_atomic(request.opcode)) {
    if (request.local.size() != 1 || request.local[0].length != 8)
      return fail(Errc::InvalidArgument,
                  where() + ": an atomic needs exactly one 8-byte local segment for the old value");
    if (caps.misaligned_atomic_refused_at_post && request.remote.addr % 8 != 0)
      return fail(Errc::InvalidArgument, where() + ": atomic on remote address " +
                                             std::to_string(request.remote.addr) +
                                             ", which is not 8-byte aligned");
  }
  const bool one_sided = request.opcode != Opcode::Send;
  if (one_sided && request.remote.owner_epoch != 0 && request.remote.owner_epoch != peer_epoch)
    return fail(Errc::StaleDescriptor, where() + ": the remote address comes from a descriptor of epoch " +
                                           std::to_string(request.remote.owner_epoch) +
                                           ", but the peer is at epoch " + std::to_string(peer_epoch) +
                                           " (another process, or an earlier life of this one)");
  return {};
}

}  // namespace

Result<void> check_chain(std::span<const WorkRequest> chain, const Capabilities& caps,
                         std::uint64_t peer_epoch) {
  if (chain.empty()) return fail(Errc::InvalidArgument, "post: empty chain");
  for (std::size_t i = 0; i < chain.size(); ++i)
    if (auto ok = check_request(chain[i], i, caps, peer_epoch); !ok) return ok;
  return {};
}

Result<void> check_recv(std::span<const Segment> sgl, const Capabilities& caps) {
  return check_segments("post_recv", SIZE_MAX, sgl, caps);
}

}  // namespace rdmakit
