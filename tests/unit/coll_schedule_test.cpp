// The collectives' pure logic without a transport: partitions, chunking, ring steps, recursive doubling
// and halving-doubling tables, binomial trees, reduction kernels and 16-bit float conversions. Each
// schedule is checked by simulating it on sets of contributions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "coll/reduce.hpp"
#include "coll/schedule.hpp"

namespace rdmakit::coll::detail {
namespace {

using Contributions = std::set<int>;  // which ranks' data a block holds

TEST(CollSchedule, PartitionCoversEverythingOnce) {
  for (std::size_t count : {0u, 1u, 7u, 64u, 1001u})
    for (int parts = 1; parts <= 9; ++parts) {
      std::size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        Block b = partition(count, parts, i);
        EXPECT_EQ(b.offset, next);
        EXPECT_LE(b.count, count / parts + 1);
        next += b.count;
      }
      EXPECT_EQ(next, count);
    }
}

TEST(CollSchedule, ChunksAreWholeElementsAndCoverTheMessage) {
  auto c = chunks(100, 64, 12);  // 64 is not a multiple of 12: chunks of 60
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].count, 60u);
  EXPECT_EQ(c[1].offset, 60u);
  EXPECT_EQ(c[1].count, 40u);
  EXPECT_EQ(chunks(0, 64, 4).size(), 1u);        // empty messages still synchronize
  EXPECT_EQ(chunks(8, 4, 8).front().count, 8u);  // a chunk never splits an element
}

TEST(CollSchedule, RingReduceScatterThenAllgatherGivesEveryoneEverything) {
  for (int n = 1; n <= 9; ++n) {
    std::vector<std::vector<Contributions>> blocks(n, std::vector<Contributions>(n));
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b) blocks[r][b] = {r};
    for (int s = 0; s < n - 1; ++s) {
      auto before = blocks;
      for (int r = 0; r < n; ++r) {
        int left = (r - 1 + n) % n;
        RingStep mine = ring_reduce_scatter_step(r, n, s), theirs = ring_reduce_scatter_step(left, n, s);
        ASSERT_EQ(mine.recv_block, theirs.send_block);
        blocks[r][mine.recv_block].insert(before[left][theirs.send_block].begin(),
                                          before[left][theirs.send_block].end());
      }
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(blocks[r][r].size(), static_cast<std::size_t>(n)) << "n=" << n;
    for (int s = 0; s < n - 1; ++s) {
      auto before = blocks;
      for (int r = 0; r < n; ++r) {
        int left = (r - 1 + n) % n;
        RingStep mine = ring_allgather_step(r, n, s), theirs = ring_allgather_step(left, n, s);
        ASSERT_EQ(mine.recv_block, theirs.send_block);
        blocks[r][mine.recv_block] = before[left][theirs.send_block];
      }
    }
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b) EXPECT_EQ(blocks[r][b].size(), static_cast<std::size_t>(n));
  }
}

TEST(CollSchedule, RecursiveDoublingReachesEveryRankForAnyWorldSize) {
  for (int n = 1; n <= 13; ++n) {
    std::vector<Contributions> data(n);
    std::vector<DoublingPlan> plans;
    for (int r = 0; r < n; ++r) data[r] = {r}, plans.push_back(recursive_doubling(r, n));
    for (int r = 0; r < n; ++r)
      if (plans[r].role == DoublingPlan::FoldSender) {
        EXPECT_EQ(plans[plans[r].fold_partner].role, DoublingPlan::FoldReceiver);
        data[plans[r].fold_partner].insert(r);
      }
    std::size_t steps = plans[n - 1].partners.size();
    for (std::size_t s = 0; s < steps; ++s) {
      auto before = data;
      for (int r = 0; r < n; ++r) {
        if (plans[r].role == DoublingPlan::FoldSender) continue;
        int partner = plans[r].partners[s];
        EXPECT_EQ(plans[partner].partners[s], r);  // partners agree
        data[r].insert(before[partner].begin(), before[partner].end());
      }
    }
    for (int r = 0; r < n; ++r) {
      if (plans[r].role == DoublingPlan::FoldSender) data[r] = data[plans[r].fold_partner];
      EXPECT_EQ(data[r].size(), static_cast<std::size_t>(n)) << "n=" << n << " rank " << r;
    }
  }
}

TEST(CollSchedule, HalvingDoublingKeepsDisjointHalvesAndPartnersAgree) {
  for (int n = 1; n <= 12; ++n) {
    int p = floor_pow2(n);
    for (int r = 0; r < n; ++r) {
      auto steps = halving_doubling(r, n);
      if (steps.empty()) continue;
      ASSERT_EQ(steps.size(), static_cast<std::size_t>(std::log2(p)));
      std::size_t size = static_cast<std::size_t>(p);
      for (std::size_t s = 0; s < steps.size(); ++s) {
        size /= 2;
        EXPECT_EQ(steps[s].keep.count, size);
        EXPECT_EQ(steps[s].send.count, size);
        auto theirs = halving_doubling(steps[s].partner, n);
        ASSERT_EQ(theirs.size(), steps.size());
        EXPECT_EQ(theirs[s].keep.offset, steps[s].send.offset);  // what I send is what they keep
        EXPECT_EQ(theirs[s].send.offset, steps[s].keep.offset);
      }
    }
    // After the reduce-scatter the kept parts of the core ranks tile the buffer.
    std::set<std::size_t> owned;
    for (int r = 0; r < n; ++r) {
      auto steps = halving_doubling(r, n);
      if (steps.empty()) continue;
      EXPECT_TRUE(owned.insert(steps.back().keep.offset).second);
    }
    EXPECT_EQ(owned.size(), static_cast<std::size_t>(p > 1 ? p : 0));
  }
}

TEST(CollSchedule, BinomialTreeSpansEveryRankOnce) {
  for (int n = 1; n <= 17; ++n)
    for (int root = 0; root < n; ++root) {
      std::vector<int> parent_count(n, 0);
      for (int r = 0; r < n; ++r) {
        TreeNode node = binomial_tree(r, n, root);
        EXPECT_EQ(node.parent < 0, r == root);
        for (int child : node.children) {
          EXPECT_EQ(binomial_tree(child, n, root).parent, r);
          ++parent_count[child];
        }
      }
      for (int r = 0; r < n; ++r) EXPECT_EQ(parent_count[r], r == root ? 0 : 1);
    }
}

TEST(CollReduce, OperatorsOnEveryIntegerAndFloatType) {
  std::vector<float> a{1, -2, 3.5f}, b{4, 5, -1};
  std::vector<float> out(3);
  reduce(out.data(), a.data(), b.data(), 3, DataType::F32, ReduceOp::Sum);
  EXPECT_EQ(out, (std::vector<float>{5, 3, 2.5f}));
  reduce(out.data(), a.data(), b.data(), 3, DataType::F32, ReduceOp::Min);
  EXPECT_EQ(out, (std::vector<float>{1, -2, -1}));
  std::vector<std::int64_t> ia{3, -7}, ib{-2, 5}, io(2);
  reduce(io.data(), ia.data(), ib.data(), 2, DataType::I64, ReduceOp::Prod);
  EXPECT_EQ(io, (std::vector<std::int64_t>{-6, -35}));
  std::vector<std::uint8_t> ua{200, 3}, ub{100, 9}, uo(2);
  reduce(uo.data(), ua.data(), ub.data(), 2, DataType::U8, ReduceOp::Max);
  EXPECT_EQ(uo, (std::vector<std::uint8_t>{200, 9}));
  std::vector<std::int32_t> avg{7, -9, 12};
  finish_average(avg.data(), 3, DataType::I32, 2);
  EXPECT_EQ(avg, (std::vector<std::int32_t>{3, -4, 6}));
}

TEST(CollReduce, HalfAndBfloatConversionsRoundToNearestEven) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-8f, 1024.5f})
    EXPECT_EQ(half_to_float(float_to_half(v)), v == 1024.5f ? 1024.0f : v) << v;
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float_to_half(2049.0f), float_to_half(2048.0f));  // tie to even
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.0f)), 3.0f);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(float_to_bf16(257.0f)), 256.0f);  // 8 bits of mantissa, tie to even
  // Every finite half survives a round trip through float.
  for (unsigned bits = 0; bits < 0x7c00; ++bits)
    ASSERT_EQ(float_to_half(half_to_float(static_cast<unsigned short>(bits))), bits) << bits;
  std::vector<std::uint16_t> h{float_to_half(1.5f), float_to_half(-4.0f)},
      g{float_to_half(2.0f), float_to_half(3.0f)};
  reduce(h.data(), h.data(), g.data(), 2, DataType::F16, ReduceOp::Sum);
  EXPECT_EQ(half_to_float(h[0]), 3.5f);
  EXPECT_EQ(half_to_float(h[1]), -1.0f);
}

}  // namespace
}  // namespace rdmakit::coll::detail
