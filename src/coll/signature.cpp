#include "coll/signature.hpp"

#include <string_view>

namespace rdmakit::coll::detail {
namespace {

constexpr std::uint32_t kFoldMask = (1u << 20) - 1;

std::string_view name(CallKind kind) {
  static constexpr std::string_view names[] = {"the communicator's setup",
                                               "closing the communicator (its process exits or it destroyed "
                                               "the communicator)",
                                               "allreduce",
                                               "reduce",
                                               "broadcast",
                                               "allgather",
                                               "reduce_scatter",
                                               "all_to_all",
                                               "barrier"};
  auto i = static_cast<std::size_t>(kind);
  return i < std::size(names) ? names[i] : "an unknown collective";
}

bool reduces(CallKind kind) {
  return kind == CallKind::Allreduce || kind == CallKind::Reduce || kind == CallKind::ReduceScatter;
}
bool typed(CallKind kind) { return kind >= CallKind::Allreduce && kind != CallKind::Barrier; }

// XOR-folding keeps every difference confined to the low 20 bits; the root is spread by an odd multiplier
// so that a root and a count that differ together rarely cancel.
std::uint32_t fold(std::size_t count, int root) {
  std::uint64_t c = count;
  std::uint64_t folded = c ^ (c >> 20) ^ (c >> 40) ^ (c >> 60);
  folded ^= static_cast<std::uint64_t>(root + 1) * 0x9e3779b1u;
  return static_cast<std::uint32_t>(folded) & kFoldMask;
}

}  // namespace

std::uint32_t signature(const Call& call) noexcept {
  return static_cast<std::uint32_t>(call.kind) << 28 | static_cast<std::uint32_t>(call.type) << 24 |
         static_cast<std::uint32_t>(call.op) << 20 | fold(call.count, call.root);
}

std::string describe(std::uint32_t sig) {
  auto kind = static_cast<CallKind>(sig >> 28);
  std::string out(name(kind));
  if (!typed(kind)) return out;
  out += " of " + std::string(to_string(static_cast<DataType>((sig >> 24) & 0xf)));
  if (reduces(kind)) out += " (" + std::string(to_string(static_cast<ReduceOp>((sig >> 20) & 0xf))) + ")";
  return out;
}

std::string mismatch(const Call& mine, std::uint32_t theirs, int peer) {
  std::uint32_t own = signature(mine);
  std::string me = describe(own) + (typed(mine.kind) ? ", " + std::to_string(mine.count) + " elements" : "") +
                   (mine.root >= 0 ? ", root " + std::to_string(mine.root) : "");
  std::string them = "rank " + std::to_string(peer) + " called " + describe(theirs);
  if ((own >> 20) == (theirs >> 20))
    them += " with another element count" + std::string(mine.root >= 0 ? " or root" : "");
  return them + " where this rank called " + me +
         ": every rank must issue the same collectives in the same order with the same count, dtype, op "
         "and root";
}

}  // namespace rdmakit::coll::detail
