// The pure logic of the collective algorithms: who talks to whom, which block, in what order. Plain
// functions over plain data, tested without a transport (tests/unit/coll_schedule_test.cpp).
#pragma once

#include <cstddef>
#include <vector>

namespace rdmakit::coll::detail {

struct Block {
  std::size_t offset = 0;  // in elements
  std::size_t count = 0;
};

// Splits `count` elements into `parts` near-equal blocks (the first count % parts one element longer).
Block partition(std::size_t count, int parts, int index) noexcept;

// Splits `bytes` into chunks of at most `chunk` bytes, each a whole number of `element` bytes.
// Zero bytes: one empty chunk, so that zero-length messages still synchronize.
std::vector<Block> chunks(std::size_t bytes, std::size_t chunk, std::size_t element);

// Ring: rank r sends to (r+1)%n and receives from (r-1+n)%n.
struct RingStep {
  int send_block = 0;
  int recv_block = 0;
};
// Reduce-scatter phase, step 0..n-2: after the last step rank r holds the reduced block r.
RingStep ring_reduce_scatter_step(int rank, int n, int step) noexcept;
// Allgather phase, step 0..n-2, starting with rank r owning block r.
RingStep ring_allgather_step(int rank, int n, int step) noexcept;

// Recursive doubling over any world size. Ranks beyond the largest power of two p fold in first:
// rank 2i (i < n-p) hands its data to 2i+1 and sits out; the remaining p ranks exchange with partners
// at distance 1, 2, 4, ... (in their renumbering); at the end each folded rank gets the result back.
struct DoublingPlan {
  enum Role { Core, FoldSender, FoldReceiver } role = Core;
  int fold_partner = -1;      // FoldSender/FoldReceiver: the other rank of the pair
  std::vector<int> partners;  // Core and FoldReceiver: real rank of the partner at each step
};
DoublingPlan recursive_doubling(int rank, int n);

// Halving-doubling (Rabenseifner) over a power-of-two group of the same renumbered ranks: the
// reduce-scatter halves the block it keeps at each step, the allgather doubles it back in reverse.
struct HalvingStep {
  int partner = 0;  // real rank
  Block send;       // block range in units of 1/p of the buffer: [offset, offset+count) of p parts
  Block keep;       // the half this rank keeps and reduces into
};
std::vector<HalvingStep> halving_doubling(int rank, int n);

// A binomial tree rooted at `root`: the parent (-1 at root) and the children in the order a rank
// serves them (farthest subtree first, so the deepest branch starts earliest).
struct TreeNode {
  int parent = -1;
  std::vector<int> children;
};
TreeNode binomial_tree(int rank, int n, int root);

// Largest power of two <= n (n >= 1).
int floor_pow2(int n) noexcept;

}  // namespace rdmakit::coll::detail
