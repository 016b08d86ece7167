// The records a peer writes into a link segment we share with it (receive completions, atomic requests),
// decoded into something we act on. The peer can write any bytes there at any time, so each record is
// copied once out of shared memory and checked before it is used: these functions are pure, and what the
// ring fuzz target (tests/fuzz/shm_ring_fuzz.cpp) runs.
#pragma once

#include <cstdint>
#include <optional>

#include "rdmakit/completion.hpp"
#include "transport/shm/layout.hpp"

namespace rdmakit::shm {

// An atomic request, as copied out of the shared slot.
struct AtomicCall {
  std::uint32_t rkey = 0;
  std::uint64_t opcode = 0;
  std::uint64_t addr = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
};

// One copy of each field: a peer changing them while we serve the request cannot make us check one
// address and act on another. The caller has acquired `state` == kAtomicRequested.
AtomicCall snapshot(const AtomicRequest& request) noexcept;
// Success when the request is well formed (a known atomic opcode on an 8-byte aligned address); keys,
// bounds and rights are checked separately against the owner's private table.
Status validate_atomic(const AtomicCall& call) noexcept;

// A receive we posted, as we remember it (our private copy; the ring entry the peer reads is not it).
struct PostedReceive {
  std::uint64_t id = 0;
  std::uint64_t capacity = 0;  // bytes of its segments
};

// The completion a peer wrote for `posted`, or nullopt when it is malformed (unknown status or opcode, a
// SEND longer than the receive). The id is ours, never the peer's.
std::optional<Completion> decode_recv_done(const RecvDone& done, const PostedReceive& posted,
                                           std::uint32_t connection) noexcept;

}  // namespace rdmakit::shm
