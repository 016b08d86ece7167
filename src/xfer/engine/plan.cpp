#include "xfer/engine/plan.hpp"

#include <algorithm>
#include <tuple>

namespace rdmakit::xfer::detail {
namespace {

// A piece never exceeds a Segment's 32-bit length, nor one message.
std::uint64_t stripe_size(const PlanLimits& limits) {
  return std::max<std::uint64_t>(1,
                                 std::min({limits.stripe_bytes, limits.max_message, std::uint64_t{1} << 30}));
}

void add_stripes(const PlanItem& item, std::uint64_t stripe, std::vector<PlannedOp>& out) {
  for (std::uint64_t done = 0; done < item.length; done += stripe) {
    auto length = std::min(stripe, item.length - done);
    out.push_back(PlannedOp{item.segment,
                            item.write,
                            item.offset + done,
                            length,
                            {LocalPiece{item.region, item.local + done, static_cast<std::uint32_t>(length)}},
                            {item.request}});
  }
}

// Whether `item` can join `op` (which ends where `item` starts in the segment).
bool joins(const PlannedOp& op, const PlanItem& item, const PlanLimits& limits) {
  if (op.segment != item.segment || op.write != item.write) return false;
  if (op.offset + op.length != item.offset) return false;
  if (op.length + item.length > std::min(limits.coalesce_bytes, limits.max_message)) return false;
  const auto& last = op.local.back();
  bool extends_local = last.region == item.region && last.addr + last.length == item.local;
  return extends_local || op.local.size() < limits.max_sge;
}

void join(PlannedOp& op, const PlanItem& item) {
  auto& last = op.local.back();
  if (last.region == item.region && last.addr + last.length == item.local) {
    last.length += static_cast<std::uint32_t>(item.length);
  } else {
    op.local.push_back(LocalPiece{item.region, item.local, static_cast<std::uint32_t>(item.length)});
  }
  op.length += item.length;
  if (op.requests.back() != item.request) op.requests.push_back(item.request);
}

}  // namespace

std::vector<PlannedOp> plan(std::span<const PlanItem> items, const PlanLimits& limits) {
  const auto stripe = stripe_size(limits);
  std::vector<PlannedOp> out;
  std::vector<PlanItem> small;
  for (const auto& item : items) {
    if (item.length <= limits.coalesce_bytes && item.length <= stripe) {
      small.push_back(item);
    } else {
      add_stripes(item, stripe, out);
    }
  }
  // Adjacent in the segment once sorted: then runs of them merge.
  std::ranges::sort(small, {}, [](const PlanItem& i) { return std::tuple(i.segment, i.write, i.offset); });
  for (const auto& item : small) {
    if (!out.empty() && joins(out.back(), item, limits)) {
      join(out.back(), item);
    } else {
      out.push_back(PlannedOp{item.segment,
                              item.write,
                              item.offset,
                              item.length,
                              {LocalPiece{item.region, item.local, static_cast<std::uint32_t>(item.length)}},
                              {item.request}});
    }
  }
  return out;
}

}  // namespace rdmakit::xfer::detail
