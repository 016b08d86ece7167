// Allreduce: ring (bandwidth-optimal, large messages), recursive doubling (latency-optimal, small
// messages) and halving-doubling (in between); cost_model.hpp chooses among them.
#include <optional>

#include "coll/algorithms.hpp"
#include "coll/reduce.hpp"

namespace rdmakit::coll::detail {
namespace {

auto reduce_into(std::byte* base, const Buffers& b) {
  return [base, &b](std::size_t offset, std::span<const std::byte> data) {
    std::size_t n = data.size() / size_of(b.type);
    reduce(base + offset, base + offset, data.data(), n, b.type, b.op);
  };
}

void prepare(const Buffers& b) {
  if (b.send != b.recv && b.count > 0) std::memmove(b.recv, b.send, b.count * size_of(b.type));
}

void finish(const Buffers& b, std::size_t offset, std::size_t count, int n) {
  if (b.op == ReduceOp::Avg) finish_average(b.recv + offset * size_of(b.type), count, b.type, n);
}

// The fold of a world size that is not a power of two: pairs hand data to their partner first.
Result<void> fold_in(Exchange& ex, const Buffers& b, const DoublingPlan& plan) {
  std::size_t bytes = b.count * size_of(b.type);
  if (plan.role == DoublingPlan::FoldSender)
    return stream(ex, plan.fold_partner, b.recv, bytes, -1, 0, size_of(b.type), copy_into(nullptr));
  if (plan.role == DoublingPlan::FoldReceiver)
    return stream(ex, -1, nullptr, 0, plan.fold_partner, bytes, size_of(b.type), reduce_into(b.recv, b));
  return {};
}

Result<void> fold_out(Exchange& ex, const Buffers& b, const DoublingPlan& plan) {
  std::size_t bytes = b.count * size_of(b.type);
  if (plan.role == DoublingPlan::FoldSender)
    return stream(ex, -1, nullptr, 0, plan.fold_partner, bytes, size_of(b.type), copy_into(b.recv));
  if (plan.role == DoublingPlan::FoldReceiver)
    return stream(ex, plan.fold_partner, b.recv, bytes, -1, 0, size_of(b.type), copy_into(nullptr));
  return {};
}

// Ring and halving-doubling send straight from the user's buffer (Exchange::InPlace) once every rank's
// block fills a chunk: below that the staging copies are few, small and cached, and settling, which waits
// twice per collective for the last write's acknowledgement, would cost more than they do. Relative to
// the chunk, so the tests' 64-byte chunks take this path at a few hundred bytes.
std::optional<Exchange::InPlace> in_place(Exchange& ex, const Buffers& b) {
  std::size_t bytes = b.count * size_of(b.type);
  if (bytes < static_cast<std::size_t>(ex.size()) * ex.chunk()) return std::nullopt;
  return std::optional<Exchange::InPlace>(std::in_place, ex, b.recv, bytes);
}

// Between the reduce-scatter and the allgather, and at the end: the allgather writes into blocks the
// reduce-scatter sent from, and the caller may change the buffer once the collective returned.
Result<void> settle(std::optional<Exchange::InPlace>& scope) {
  return scope ? scope->settle() : Result<void>{};
}

// Elements covered by parts [first, first+parts) of a p-way partition.
Block span_of(std::size_t count, int p, Block parts) {
  Block first = partition(count, p, static_cast<int>(parts.offset));
  Block last = partition(count, p, static_cast<int>(parts.offset + parts.count - 1));
  return Block{first.offset, last.offset + last.count - first.offset};
}

}  // namespace

// Sources and destinations of one step are disjoint blocks, and a block sent in one phase is written
// only in the next one: what sending in place needs (settle() between the phases).
Result<void> allreduce_ring(Exchange& ex, const Buffers& b) {
  prepare(b);
  auto scope = in_place(ex, b);
  int n = ex.size(), r = ex.rank();
  std::size_t e = size_of(b.type);
  int right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int s = 0; n > 1 && s < n - 1; ++s) {
    RingStep st = ring_reduce_scatter_step(r, n, s);
    Block sb = partition(b.count, n, st.send_block), rb = partition(b.count, n, st.recv_block);
    if (auto ok = stream(ex, right, b.recv + sb.offset * e, sb.count * e, left, rb.count * e, e,
                         reduce_into(b.recv + rb.offset * e, b));
        !ok)
      return ok;
  }
  if (auto ok = settle(scope); !ok) return ok;
  Block mine = partition(b.count, n, r);
  finish(b, mine.offset, mine.count, n);  // each rank averages its own block once; the allgather spreads it
  for (int s = 0; n > 1 && s < n - 1; ++s) {
    RingStep st = ring_allgather_step(r, n, s);
    Block sb = partition(b.count, n, st.send_block), rb = partition(b.count, n, st.recv_block);
    if (auto ok = stream(ex, right, b.recv + sb.offset * e, sb.count * e, left, rb.count * e, e,
                         copy_into(b.recv + rb.offset * e));
        !ok)
      return ok;
  }
  return settle(scope);
}

Result<void> allreduce_doubling(Exchange& ex, const Buffers& b) {
  prepare(b);
  DoublingPlan plan = recursive_doubling(ex.rank(), ex.size());
  std::size_t e = size_of(b.type), bytes = b.count * e;
  if (auto ok = fold_in(ex, b, plan); !ok) return ok;
  for (int partner : plan.partners)
    if (auto ok = stream(ex, partner, b.recv, bytes, partner, bytes, e, reduce_into(b.recv, b)); !ok)
      return ok;
  if (plan.role != DoublingPlan::FoldSender) finish(b, 0, b.count, ex.size());
  return fold_out(ex, b, plan);
}

Result<void> allreduce_halving(Exchange& ex, const Buffers& b) {
  prepare(b);
  DoublingPlan plan = recursive_doubling(ex.rank(), ex.size());
  std::vector<HalvingStep> steps = halving_doubling(ex.rank(), ex.size());
  int p = floor_pow2(ex.size());
  std::size_t e = size_of(b.type);
  if (auto ok = fold_in(ex, b, plan); !ok) return ok;
  // The folds send from and then receive into the whole buffer: they stay outside the scope.
  auto scope = in_place(ex, b);
  for (const HalvingStep& st : steps) {
    Block send = span_of(b.count, p, st.send), keep = span_of(b.count, p, st.keep);
    if (auto ok = stream(ex, st.partner, b.recv + send.offset * e, send.count * e, st.partner, keep.count * e,
                         e, reduce_into(b.recv + keep.offset * e, b));
        !ok)
      return ok;
  }
  if (auto ok = settle(scope); !ok) return ok;
  if (!steps.empty()) {
    Block mine = span_of(b.count, p, steps.back().keep);
    finish(b, mine.offset, mine.count, ex.size());
  } else if (plan.role != DoublingPlan::FoldSender) {
    finish(b, 0, b.count, ex.size());
  }
  for (auto st = steps.rbegin(); st != steps.rend(); ++st) {
    Block have = span_of(b.count, p, st->keep), get = span_of(b.count, p, st->send);
    if (auto ok = stream(ex, st->partner, b.recv + have.offset * e, have.count * e, st->partner,
                         get.count * e, e, copy_into(b.recv + get.offset * e));
        !ok)
      return ok;
  }
  if (auto ok = settle(scope); !ok) return ok;
  scope.reset();
  return fold_out(ex, b, plan);
}

}  // namespace rdmakit::coll::detail
