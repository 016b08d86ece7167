// How a batch becomes work requests: long requests split into stripes, short requests that are adjacent in
// the segment merged into one scatter-gather work request. Pure logic over plain data, tested alone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace rdmakit::xfer::detail {

struct PlanItem {
  std::uint32_t request = 0;  // index in the batch
  std::uint32_t segment = 0;  // segment handle: items of one segment may share a work request
  bool write = true;
  std::uint32_t region = 0;  // the local registration it lies in (pieces never span two)
  std::uint64_t local = 0;   // address
  std::uint64_t offset = 0;  // into the segment
  std::uint64_t length = 0;
};

struct PlanLimits {
  std::uint64_t stripe_bytes = 1 << 20;     // longer items are split into stripes of this size
  std::uint64_t coalesce_bytes = 64 << 10;  // merged runs stay within this size
  std::uint32_t max_sge = 16;               // local pieces per work request
  std::uint64_t max_message = 1u << 31;     // bytes per work request (the transports' max_message_size)
};

struct LocalPiece {
  std::uint32_t region = 0;
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
};

// One work request: a contiguous range of a segment and the local pieces it moves. The pieces and requests
// are views into the Plan's flat arrays (one allocation each for a whole batch, not two per work request).
struct PlannedOp {
  std::uint32_t segment = 0;
  bool write = true;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint32_t first_piece = 0;  // index of local[0] in Plan::pieces
  std::span<const LocalPiece> local{};
  std::span<const std::uint32_t> requests{};  // every request whose bytes it carries
};

// The work requests of a batch. Move-only: the ops' views point into its own arrays (a move keeps them).
struct Plan {
  std::vector<PlannedOp> ops;
  std::vector<LocalPiece> pieces;
  std::vector<std::uint32_t> requests;

  Plan() = default;
  Plan(Plan&&) = default;
  Plan& operator=(Plan&&) = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  std::size_t size() const noexcept { return ops.size(); }
  bool empty() const noexcept { return ops.empty(); }
  const PlannedOp& operator[](std::size_t k) const { return ops[k]; }
  const PlannedOp& back() const { return ops.back(); }
  auto begin() const { return ops.begin(); }
  auto end() const { return ops.end(); }
};

// The work requests for `items`. Every byte of every item is in exactly one op.
Plan plan(std::span<const PlanItem> items, const PlanLimits& limits);

}  // namespace rdmakit::xfer::detail
