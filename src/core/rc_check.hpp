// The RC rules for what may be posted, written once for every transport. Connection::post() and post_recv()
// (the RC prologue, detail::ConnectionProvider::run_post in src/core/connection.cpp) begin with
// RcState::check_post / check_post_recv (core/rc_state.hpp), which run these first,
// before the closed, error-state and queue-full checks and before anything is queued: a request they
// refuse is an error at post (nothing of the chain was posted, the connection stays healthy), as
// ibv_post_send refuses a malformed work request. What genuinely differs between transports comes from
// Capabilities, never from the transport's name.
#pragma once

#include <cstdint>
#include <span>

#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit {

// Checks a chain for post(): not empty, only send-side opcodes, at most caps.max_sge segments and
// caps.max_message_size bytes per request, one 8-byte result segment per atomic (8-byte aligned remote
// address where caps.misaligned_atomic_refused_at_post), and remote addresses of the peer's current life
// (`peer_epoch`; a descriptor without an epoch, 0, is taken as current).
Result<void> check_chain(std::span<const WorkRequest> chain, const Capabilities& caps,
                         std::uint64_t peer_epoch);
// Checks a scatter-gather list for post_recv().
Result<void> check_recv(std::span<const Segment> sgl, const Capabilities& caps);

// The bytes a scatter-gather list covers.
inline std::uint64_t total_length(std::span<const Segment> segments) noexcept {
  std::uint64_t total = 0;
  for (const Segment& segment : segments) total += segment.length;
  return total;
}

}  // namespace rdmakit
