// The device-free parts of the engine: how a batch becomes work requests, and the segment record.
#include "xfer/engine/plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "xfer/engine/record.hpp"

namespace rdmakit::xfer::detail {
namespace {

// Every byte of every item is carried exactly once, at the right local address.
void expect_covers(std::span<const PlanItem> items, std::span<const PlannedOp> ops) {
  std::uint64_t item_bytes = 0, op_bytes = 0;
  for (const auto& i : items) item_bytes += i.length;
  for (const auto& op : ops) {
    std::uint64_t local = 0;
    for (const auto& p : op.local) local += p.length;
    EXPECT_EQ(local, op.length);
    op_bytes += op.length;
  }
  EXPECT_EQ(item_bytes, op_bytes);
}

TEST(XferPlan, LongRequestsAreStriped) {
  PlanItem item{0, 1, true, 1, 0x100000, 4096, 5 * 1024 * 1024 + 7};
  auto ops = plan(std::span(&item, 1), PlanLimits{.stripe_bytes = 1 << 20});
  ASSERT_EQ(ops.size(), 6u);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    EXPECT_EQ(ops[k].offset, 4096 + k * (1 << 20));
    EXPECT_EQ(ops[k].local.front().addr, 0x100000 + k * (1 << 20));
    EXPECT_TRUE(std::ranges::equal(ops[k].requests, std::vector<std::uint32_t>{0}));
  }
  EXPECT_EQ(ops.back().length, 7u);
  expect_covers(std::span(&item, 1), ops.ops);
}

TEST(XferPlan, AdjacentSmallRequestsShareOneScatterGatherList) {
  // Eight 4 KiB pieces adjacent in the segment but scattered locally, submitted out of order.
  std::vector<PlanItem> items;
  for (std::uint32_t k = 0; k < 8; ++k) {
    std::uint32_t slot = (k * 5) % 8;
    items.push_back(PlanItem{k, 1, true, 1, 0x10000 + slot * 0x10000, slot * 4096ull, 4096});
  }
  auto ops = plan(items, PlanLimits{.coalesce_bytes = 64 << 10, .max_sge = 4});
  ASSERT_EQ(ops.size(), 2u);  // max_sge 4 splits the run of 8
  for (const auto& op : ops) {
    EXPECT_EQ(op.local.size(), 4u);
    EXPECT_EQ(op.requests.size(), 4u);
  }
  EXPECT_EQ(ops[0].offset, 0u);
  EXPECT_EQ(ops[1].offset, 4 * 4096u);
  expect_covers(items, ops.ops);
}

TEST(XferPlan, LocallyContiguousPiecesMergeUnlessInAnotherRegion) {
  std::vector<PlanItem> items{{0, 1, false, 1, 0x1000, 0, 512},
                              {1, 1, false, 1, 0x1200, 512, 512},
                              {2, 1, false, 2, 0x1400, 1024, 512}};
  auto ops = plan(items, PlanLimits{});
  ASSERT_EQ(ops.size(), 1u);
  ASSERT_EQ(ops[0].local.size(), 2u);  // 0 and 1 merge; 2 lies in another registration
  EXPECT_EQ(ops[0].local[0].length, 1024u);
}

TEST(XferPlan, NeverMergesAcrossSegmentsOpsGapsOrTheCoalesceLimit) {
  std::vector<PlanItem> items{{0, 1, true, 1, 0x1000, 0, 4096},      {1, 2, true, 1, 0x2000, 4096, 4096},
                              {2, 1, false, 1, 0x3000, 4096, 4096},  {3, 1, true, 1, 0x4000, 8192 + 1, 4096},
                              {4, 1, true, 1, 0x5000, 16384, 60000}, {5, 1, true, 1, 0x20000, 76384, 8192}};
  auto ops = plan(items, PlanLimits{.coalesce_bytes = 64 << 10});
  EXPECT_EQ(ops.size(), 6u);
  expect_covers(items, ops.ops);
}

TEST(XferRecord, RoundTripsAndRefusesDamagedBytes) {
  SegmentRecord record{"prefill-0",
                       "boot/net:1",
                       1 << 20,
                       {{"tcp", "127.0.0.1:4000", RemoteRegion{0x1000, 1 << 20, 7, Access::All, 9, 11}},
                        {"shm", "shm:x", RemoteRegion{0x2000, 2 << 20, 8, Access::All, 9, 12}}}};
  auto bytes = encode(record);
  auto back = decode(bytes);
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(*back, record);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(decode(std::span(bytes).first(cut)).has_value()) << "truncated at " << cut;
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(decode(longer).has_value());
  record.rails[0].region.length = 4096;  // a descriptor shorter than the segment
  EXPECT_FALSE(decode(encode(record)).has_value());
}

// The preference comes from what each transport declares, not from its name: a same-host-only transport for
// an owner on this host, then a kernel-bypass one, then any other, ties in the engine's order.
TEST(XferRecord, TransportIsSameHostOnlyOnTheSameHostElseKernelBypassElseAny) {
  SegmentRecord record{
      "o", "host-a", 4096, {{"shm", "shm:a", {}}, {"tcp", "127.0.0.1:1", {}}, {"verbs", "10.0.0.1:1", {}}}};
  const OfferedTransport shm{.name = "shm", .same_host_only = true}, tcp{.name = "tcp"},
      verbs{.name = "verbs", .kernel_bypass = true};
  std::vector<OfferedTransport> all{tcp, verbs, shm}, tcp_shm{tcp, shm};
  EXPECT_EQ(*choose_transport(all, "host-a", record, ""), "shm");
  EXPECT_EQ(*choose_transport(all, "host-b", record, ""), "verbs");
  EXPECT_EQ(*choose_transport(tcp_shm, "host-b", record, ""), "tcp");
  EXPECT_EQ(*choose_transport(tcp_shm, "host-a", record, ""), "shm");
  EXPECT_EQ(*choose_transport(all, "host-a", record, "tcp"), "tcp");
  // Names play no part: the same properties under other names are chosen alike.
  SegmentRecord renamed{
      "o", "host-a", 4096, {{"a", "x:1", {}}, {"b", "1.2.3.4:1", {}}, {"c", "1.2.3.5:1", {}}}};
  std::vector<OfferedTransport> others{
      {.name = "b"}, {.name = "a", .same_host_only = true}, {.name = "c", .kernel_bypass = true}};
  EXPECT_EQ(*choose_transport(others, "host-a", renamed, ""), "a");
  EXPECT_EQ(*choose_transport(others, "host-b", renamed, ""), "c");
  std::vector<OfferedTransport> shm_only{shm};
  auto none = choose_transport(shm_only, "host-b", record, "");
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message().find("another host"), std::string::npos);
  EXPECT_FALSE(choose_transport(tcp_shm, "host-a", record, "verbs").has_value());
}

}  // namespace
}  // namespace rdmakit::xfer::detail
