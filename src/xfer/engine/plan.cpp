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

// While a plan is built an op's pieces and requests are the tails of the flat arrays (only the last op
// grows); its views are set once every array has its final place.
struct Building {
  Plan out;
  std::vector<std::uint32_t> first_request;  // by op

  void open(const PlanItem& item, std::uint64_t offset, std::uint64_t length, std::uint64_t local) {
    out.ops.push_back(
        PlannedOp{item.segment, item.write, offset, length, static_cast<std::uint32_t>(out.pieces.size())});
    out.pieces.push_back(LocalPiece{item.region, local, static_cast<std::uint32_t>(length)});
    first_request.push_back(static_cast<std::uint32_t>(out.requests.size()));
    out.requests.push_back(item.request);
  }
  std::span<const LocalPiece> pieces_of_last() const {
    return std::span(out.pieces).subspan(out.ops.back().first_piece);
  }
  Plan finish() {
    for (std::size_t k = 0; k < out.ops.size(); ++k) {
      auto& op = out.ops[k];
      auto pieces_end = k + 1 < out.ops.size() ? out.ops[k + 1].first_piece : out.pieces.size();
      auto requests_end = k + 1 < out.ops.size() ? first_request[k + 1] : out.requests.size();
      op.local = std::span(out.pieces).subspan(op.first_piece, pieces_end - op.first_piece);
      op.requests = std::span(out.requests).subspan(first_request[k], requests_end - first_request[k]);
    }
    return std::move(out);
  }
};

void add_stripes(const PlanItem& item, std::uint64_t stripe, Building& b) {
  for (std::uint64_t done = 0; done < item.length; done += stripe)
    b.open(item, item.offset + done, std::min(stripe, item.length - done), item.local + done);
}

// Whether `item` can join the last op (which ends where `item` starts in the segment).
bool joins(const Building& b, const PlanItem& item, const PlanLimits& limits) {
  const auto& op = b.out.ops.back();
  if (op.segment != item.segment || op.write != item.write) return false;
  if (op.offset + op.length != item.offset) return false;
  if (op.length + item.length > std::min(limits.coalesce_bytes, limits.max_message)) return false;
  auto pieces = b.pieces_of_last();
  const auto& last = pieces.back();
  bool extends_local = last.region == item.region && last.addr + last.length == item.local;
  return extends_local || pieces.size() < limits.max_sge;
}

void join(Building& b, const PlanItem& item) {
  auto& op = b.out.ops.back();
  auto& last = b.out.pieces.back();
  if (last.region == item.region && last.addr + last.length == item.local) {
    last.length += static_cast<std::uint32_t>(item.length);
  } else {
    b.out.pieces.push_back(LocalPiece{item.region, item.local, static_cast<std::uint32_t>(item.length)});
  }
  op.length += item.length;
  if (b.out.requests.back() != item.request) b.out.requests.push_back(item.request);
}

}  // namespace

Plan plan(std::span<const PlanItem> items, const PlanLimits& limits) {
  const auto stripe = stripe_size(limits);
  auto is_small = [&](const PlanItem& item) {
    return item.length <= limits.coalesce_bytes && item.length <= stripe;
  };
  auto key = [](const PlanItem& i) { return std::tuple(i.segment, i.write, i.offset); };
  Building b;
  b.out.ops.reserve(items.size());
  b.out.pieces.reserve(items.size());
  b.out.requests.reserve(items.size());
  // Adjacent in the segment once sorted: then runs of them merge. (Stable: requests to one offset keep
  // their order.) The common list, all small and in order already, is planned where it lies, uncopied.
  std::vector<PlanItem> copy;
  std::span<const PlanItem> small = items;
  if (!std::ranges::all_of(items, is_small) || !std::ranges::is_sorted(items, {}, key)) {
    copy.reserve(items.size());
    for (const auto& item : items) {
      if (is_small(item))
        copy.push_back(item);
      else
        add_stripes(item, stripe, b);
    }
    std::ranges::stable_sort(copy, {}, key);
    small = copy;
  }
  for (const auto& item : small) {
    if (!b.out.ops.empty() && joins(b, item, limits)) {
      join(b, item);
    } else {
      b.open(item, item.offset, item.length, item.local);
    }
  }
  return b.finish();
}

}  // namespace rdmakit::xfer::detail
