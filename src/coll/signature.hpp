// What a collective call is, in 32 bits: every data chunk a rank sends carries the signature of the call
// that sent it in its write-with-immediate (the immediate is there anyway, so the check costs no byte and
// no round trip), and the receiver compares it with its own call's. A rank that issued another collective,
// or the same one with another element type, operator, count or root, is found at the first chunk that
// crosses between the two, instead of reducing bytes of the wrong shape into the result. The shared-memory
// path compares the same word through the ranks' control blocks (shared.hpp).
//
// Layout: bits 28-31 the kind, 24-27 the element type, 20-23 the operator, 0-19 a fold of the count and
// the root. Kind, type and operator decode exactly (the error names them); the fold tells only that the
// count or root differ: counts that differ by less than 2^20 always fold differently. Plain functions,
// unit-tested in coll_mismatch_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "rdmakit/coll/types.hpp"

namespace rdmakit::coll::detail {

enum class CallKind : std::uint8_t {
  Setup,  // the communicator's own collectives while it is created
  Close,  // the barrier of a communicator that closes
  Allreduce,
  Reduce,
  Broadcast,
  Allgather,
  ReduceScatter,
  AllToAll,
  Barrier,
};

// One call as its caller made it (before any internal widening, e.g. Avg over f16 runs in f32).
struct Call {
  CallKind kind = CallKind::Setup;
  DataType type = DataType::U8;
  ReduceOp op = ReduceOp::Sum;  // Sum where the collective does not reduce
  std::size_t count = 0;
  int root = -1;  // -1 where the collective has none
};

std::uint32_t signature(const Call& call) noexcept;
// "allreduce of f32 (sum)": what the signature's exact bits say.
std::string describe(std::uint32_t signature);
// Why `theirs` (rank `peer`'s) differs from this rank's `mine`, as one sentence naming both calls.
std::string mismatch(const Call& mine, std::uint32_t theirs, int peer);

}  // namespace rdmakit::coll::detail
