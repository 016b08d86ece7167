#include "core/rc_check.hpp"

#include <string>

namespace rdmakit {
namespace {

bool is_atomic(Opcode opcode) noexcept { return opcode == Opcode::CompareSwap || opcode == Opcode::FetchAdd; }

// What is wrong with a request, found without building an error: the checks run on every post, and on an
// emulated CPU (Soft-RoCE under QEMU/TCG) returning a Result from each level of them was about a tenth of
// an 8-byte verbs READ's user-space instructions. The message is made only for a refused request.
enum class Problem : std::uint8_t {
  None,
  RecvOpcode,
  UnknownOpcode,
  TooManySegments,
  TooLarge,
  AtomicSegment,
  AtomicMisaligned,
  StaleEpoch
};

Problem segments_problem(std::span<const Segment> segments, const Capabilities& caps) noexcept {
  if (segments.size() > caps.max_sge) return Problem::TooManySegments;
  if (caps.max_message_size != 0 && total_length(segments) > caps.max_message_size) return Problem::TooLarge;
  return Problem::None;
}

Problem request_problem(const WorkRequest& request, const Capabilities& caps,
                        std::uint64_t peer_epoch) noexcept {
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
      return Problem::RecvOpcode;
    default:
      return Problem::UnknownOpcode;
  }
  if (auto problem = segments_problem(request.local, caps); problem != Problem::None) return problem;
  if (is_atomic(request.opcode)) {
    if (request.local.size() != 1 || request.local[0].length != 8) return Problem::AtomicSegment;
    if (caps.misaligned_atomic_refused_at_post && request.remote.addr % 8 != 0)
      return Problem::AtomicMisaligned;
  }
  const bool one_sided = request.opcode != Opcode::Send;
  if (one_sided && request.remote.owner_epoch != 0 && request.remote.owner_epoch != peer_epoch)
    return Problem::StaleEpoch;
  return Problem::None;
}

// The message prefix of an error ("post request 2"), built only when there is an error to report: this
// check runs on every post, and formatting it eagerly was 40 % of an 8-byte shm WRITE's instructions.
std::string where_segments(std::string_view what, std::size_t index) {
  return std::string(what) + (index == SIZE_MAX ? "" : " request " + std::to_string(index));
}

std::unexpected<Error> segments_error(Problem problem, std::string_view what, std::size_t index,
                                      std::span<const Segment> segments, const Capabilities& caps) {
  if (problem == Problem::TooManySegments)
    return fail(Errc::InvalidArgument, where_segments(what, index) + ": " + std::to_string(segments.size()) +
                                           " scatter-gather entries, max_sge is " +
                                           std::to_string(caps.max_sge));
  return fail(Errc::InvalidArgument,
              where_segments(what, index) + ": " + std::to_string(total_length(segments)) +
                  " bytes exceed the maximum message size of " + std::to_string(caps.max_message_size));
}

std::unexpected<Error> request_error(Problem problem, const WorkRequest& request, std::size_t index,
                                     const Capabilities& caps, std::uint64_t peer_epoch) {
  const std::string where = "post: request " + std::to_string(index);
  switch (problem) {
    case Problem::RecvOpcode:
      return fail(Errc::InvalidArgument, where + ": opcode " + std::string(to_string(request.opcode)) +
                                             " is posted with post_recv()");
    case Problem::UnknownOpcode:
      return fail(Errc::InvalidArgument,
                  where + ": unknown opcode " + std::to_string(static_cast<int>(request.opcode)));
    case Problem::AtomicSegment:
      return fail(Errc::InvalidArgument,
                  where + ": an atomic needs exactly one 8-byte local segment for the old value");
    case Problem::AtomicMisaligned:
      return fail(Errc::InvalidArgument, where + ": atomic on remote address " +
                                             std::to_string(request.remote.addr) +
                                             ", which is not 8-byte aligned");
    case Problem::StaleEpoch:
      return fail(Errc::StaleDescriptor, where + ": the remote address comes from a descriptor of epoch " +
                                             std::to_string(request.remote.owner_epoch) +
                                             ", but the peer is at epoch " + std::to_string(peer_epoch) +
                                             " (another process, or an earlier life of this one)");
    default:  // TooManySegments, TooLarge
      return segments_error(problem, "post", index, request.local, caps);
  }
}

}  // namespace

Result<void> check_chain(std::span<const WorkRequest> chain, const Capabilities& caps,
                         std::uint64_t peer_epoch) {
  if (chain.empty()) return fail(Errc::InvalidArgument, "post: empty chain");
  for (std::size_t i = 0; i < chain.size(); ++i)
    if (auto problem = request_problem(chain[i], caps, peer_epoch); problem != Problem::None) [[unlikely]]
      return request_error(problem, chain[i], i, caps, peer_epoch);
  return {};
}

Result<void> check_recv(std::span<const Segment> sgl, const Capabilities& caps) {
  if (auto problem = segments_problem(sgl, caps); problem != Problem::None) [[unlikely]]
    return segments_error(problem, "post_recv", SIZE_MAX, sgl, caps);
  return {};
}

}  // namespace rdmakit
