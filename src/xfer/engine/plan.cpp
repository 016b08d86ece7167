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
// grows); its views are set once every array has its final place. The arrays are sized for the most a
// plan can need (an item adds at most one op, one piece and one request per stripe) and filled by index:
// no capacity check per element on the per-request path.
struct Building {
  Plan out;
  std::vector<std::uint32_t> first_request;  // by op
  std::size_t ops = 0, pieces = 0, requests = 0;

  explicit Building(std::size_t bound) {
    out.ops.resize(bound);
    out.pieces.resize(bound);
    out.requests.resize(bound);
    first_request.resize(bound);
  }
  PlannedOp& last() { return out.ops[ops - 1]; }
  const PlannedOp& last() const { return out.ops[ops - 1]; }
  void open(const PlanItem& item, std::uint64_t offset, std::uint64_t length, std::uint64_t local) {
    first_request[ops] = static_cast<std::uint32_t>(requests);
    out.ops[ops++] = PlannedOp{item.segment, item.write, offset, length, static_cast<std::uint32_t>(pieces)};
    out.pieces[pieces++] = LocalPiece{item.region, local, static_cast<std::uint32_t>(length)};
    out.requests[requests++] = item.request;
  }
  std::span<const LocalPiece> pieces_of_last() const {
    return std::span(out.pieces.data() + last().first_piece, pieces - last().first_piece);
  }
  Plan finish() {
    out.ops.resize(ops);  // shrinking keeps every array where it is: the views below stay valid
    out.pieces.resize(pieces);
    out.requests.resize(requests);
    for (std::size_t k = 0; k < ops; ++k) {
      auto& op = out.ops[k];
      auto pieces_end = k + 1 < ops ? out.ops[k + 1].first_piece : pieces;
      auto requests_end = k + 1 < ops ? first_request[k + 1] : requests;
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
  const auto& op = b.last();
  if (op.segment != item.segment || op.write != item.write) return false;
  if (op.offset + op.length != item.offset) return false;
  if (op.length + item.length > std::min(limits.coalesce_bytes, limits.max_message)) return false;
  auto pieces = b.pieces_of_last();
  const auto& last = pieces.back();
  bool extends_local = last.region == item.region && last.addr + last.length == item.local;
  return extends_local || pieces.size() < limits.max_sge;
}

void join(Building& b, const PlanItem& item) {
  auto& op = b.last();
  auto& last = b.out.pieces[b.pieces - 1];
  if (last.region == item.region && last.addr + last.length == item.local) {
    last.length += static_cast<std::uint32_t>(item.length);
  } else {
    b.out.pieces[b.pieces++] = LocalPiece{item.region, item.local, static_cast<std::uint32_t>(item.length)};
  }
  op.length += item.length;
  if (b.out.requests[b.requests - 1] != item.request) b.out.requests[b.requests++] = item.request;
}

}  // namespace

Plan plan(std::span<const PlanItem> items, const PlanLimits& limits) {
  const auto stripe = stripe_size(limits);
  auto is_small = [&](const PlanItem& item) {
    return item.length <= limits.coalesce_bytes && item.length <= stripe;
  };
  auto key = [](const PlanItem& i) { return std::tuple(i.segment, i.write, i.offset); };
  std::size_t bound = 0;
  for (const auto& item : items) bound += is_small(item) ? 1 : (item.length + stripe - 1) / stripe;
  Building b(bound);
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
    if (b.ops != 0 && joins(b, item, limits)) {
      join(b, item);
    } else {
      b.open(item, item.offset, item.length, item.local);
    }
  }
  return b.finish();
}

}  // namespace rdmakit::xfer::detail
