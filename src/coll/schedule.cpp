#include "coll/schedule.hpp"

#include <algorithm>

namespace rdmakit::coll::detail {

Block partition(std::size_t count, int parts, int index) noexcept {
  std::size_t p = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(index);
  std::size_t base = count / p, extra = count % p;
  return Block{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

std::vector<Block> chunks(std::size_t bytes, std::size_t chunk, std::size_t element) {
  std::size_t step = std::max<std::size_t>(element, chunk / element * element);
  std::vector<Block> out;
  for (std::size_t offset = 0; offset < bytes; offset += step)
    out.push_back({offset, std::min(step, bytes - offset)});
  if (out.empty()) out.push_back({0, 0});
  return out;
}

static int mod(int a, int n) noexcept { return ((a % n) + n) % n; }

RingStep ring_reduce_scatter_step(int rank, int n, int step) noexcept {
  return RingStep{mod(rank - step - 1, n), mod(rank - step - 2, n)};
}

RingStep ring_allgather_step(int rank, int n, int step) noexcept {
  return RingStep{mod(rank - step, n), mod(rank - step - 1, n)};
}

int floor_pow2(int n) noexcept {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Renumbering of the core group: new rank -> real rank.
static int real_rank(int new_rank, int folded) noexcept {
  return new_rank < folded ? new_rank * 2 + 1 : new_rank + folded;
}

DoublingPlan recursive_doubling(int rank, int n) {
  int p = floor_pow2(n), folded = n - p;
  DoublingPlan plan;
  int new_rank = rank - folded;
  if (rank < 2 * folded) {
    if (rank % 2 == 0) return DoublingPlan{DoublingPlan::FoldSender, rank + 1, {}};
    plan.role = DoublingPlan::FoldReceiver;
    plan.fold_partner = rank - 1;
    new_rank = rank / 2;
  }
  for (int mask = 1; mask < p; mask <<= 1) plan.partners.push_back(real_rank(new_rank ^ mask, folded));
  return plan;
}

std::vector<HalvingStep> halving_doubling(int rank, int n) {
  int p = floor_pow2(n), folded = n - p;
  int new_rank = rank < 2 * folded ? (rank % 2 == 0 ? -1 : rank / 2) : rank - folded;
  std::vector<HalvingStep> steps;
  if (new_rank < 0) return steps;
  std::size_t offset = 0, count = static_cast<std::size_t>(p);
  for (int mask = p / 2; mask >= 1; mask >>= 1) {
    int partner = new_rank ^ mask;
    std::size_t half = count / 2;
    bool keep_low = (new_rank & mask) == 0;
    Block low{offset, half}, high{offset + half, half};
    steps.push_back(HalvingStep{real_rank(partner, folded), keep_low ? high : low, keep_low ? low : high});
    offset = keep_low ? low.offset : high.offset;
    count = half;
  }
  return steps;
}

TreeNode binomial_tree(int rank, int n, int root) {
  int relative = mod(rank - root, n);
  TreeNode node;
  int mask = 1;
  while (mask < n) {
    if (relative & mask) {
      node.parent = mod(relative - mask + root, n);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (relative + mask < n) node.children.push_back(mod(relative + mask + root, n));
  return node;
}

}  // namespace rdmakit::coll::detail
