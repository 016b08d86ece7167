// Pure logic of the verbs transport: status, opcode, access and MTU mappings, timeouts, GID choice, QP
// attribute tables. No device needed.
#include <gtest/gtest.h>

#include "transport/verbs/mapping.hpp"
#include "transport/verbs/qp_attrs.hpp"

namespace rdmakit::verbs_impl {
namespace {

using namespace std::chrono_literals;

TEST(VerbsMapping, StatusesMapOneToOne) {
  EXPECT_EQ(map_status(IBV_WC_SUCCESS), Status::Success);
  EXPECT_EQ(map_status(IBV_WC_LOC_LEN_ERR), Status::LocalLength);
  EXPECT_EQ(map_status(IBV_WC_LOC_PROT_ERR), Status::LocalProtection);
  EXPECT_EQ(map_status(IBV_WC_LOC_QP_OP_ERR), Status::LocalQpOperation);
  EXPECT_EQ(map_status(IBV_WC_REM_ACCESS_ERR), Status::RemoteAccess);
  EXPECT_EQ(map_status(IBV_WC_REM_INV_REQ_ERR), Status::RemoteInvalidRequest);
  EXPECT_EQ(map_status(IBV_WC_REM_OP_ERR), Status::RemoteOperation);
  EXPECT_EQ(map_status(IBV_WC_RNR_RETRY_EXC_ERR), Status::RnrRetryExceeded);
  EXPECT_EQ(map_status(IBV_WC_RETRY_EXC_ERR), Status::TransportRetryExceeded);
  EXPECT_EQ(map_status(IBV_WC_WR_FLUSH_ERR), Status::Flushed);
  EXPECT_EQ(map_status(IBV_WC_GENERAL_ERR), Status::GeneralError);
  EXPECT_EQ(map_status(IBV_WC_MW_BIND_ERR), Status::GeneralError);
}

TEST(VerbsMapping, OpcodesAndAccess) {
  EXPECT_EQ(map_opcode(Opcode::Write, false), IBV_WR_RDMA_WRITE);
  EXPECT_EQ(map_opcode(Opcode::WriteImm, false), IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(map_opcode(Opcode::Read, false), IBV_WR_RDMA_READ);
  EXPECT_EQ(map_opcode(Opcode::CompareSwap, false), IBV_WR_ATOMIC_CMP_AND_SWP);
  EXPECT_EQ(map_opcode(Opcode::FetchAdd, false), IBV_WR_ATOMIC_FETCH_AND_ADD);
  EXPECT_EQ(map_opcode(Opcode::Send, false), IBV_WR_SEND);
  EXPECT_EQ(map_opcode(Opcode::Send, true), IBV_WR_SEND_WITH_IMM);
  EXPECT_EQ(map_access(Access::All), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                         IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  EXPECT_EQ(map_access(Access::RemoteRead | Access::LocalWrite),
            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE);
}

TEST(VerbsMapping, MtuRoundTrips) {
  for (std::uint32_t bytes : {256u, 512u, 1024u, 2048u, 4096u}) {
    auto mtu = mtu_from_bytes(bytes);
    ASSERT_TRUE(mtu) << bytes;
    EXPECT_EQ(mtu_to_bytes(*mtu), bytes);
  }
  EXPECT_FALSE(mtu_from_bytes(0));
  EXPECT_FALSE(mtu_from_bytes(1500));
  EXPECT_EQ(mtu_to_bytes(static_cast<ibv_mtu>(0)), 0u);
  EXPECT_EQ(mtu_to_bytes(static_cast<ibv_mtu>(6)), 0u);
}

TEST(VerbsMapping, AckTimeoutBoundsTheFailureTime) {
  for (auto budget : {1ms, 10ms, 100ms, 4000ms, 60000ms}) {
    AckTimeout t = ack_timeout_for(budget);
    EXPECT_GE(t.timeout, 1) << "0 would mean: wait forever";
    EXPECT_LE(t.timeout, 31);
    EXPECT_LE(t.retry_cnt, 7);
    auto total = ack_timeout_duration(t.timeout) * (t.retry_cnt + 1);
    EXPECT_LE(total, budget) << budget.count();
    EXPECT_GT(total * 2 * (t.retry_cnt + 1), budget / (t.retry_cnt + 1)) << "not needlessly short";
  }
  EXPECT_EQ(ack_timeout_for(4000ms).retry_cnt, 7);
  EXPECT_EQ(ack_timeout_duration(14).count(), 67108);  // 4.096 us * 2^14
}

TEST(VerbsMapping, RnrTimerAndRetries) {
  EXPECT_EQ(rnr_timer_duration(1).count(), 10);
  EXPECT_EQ(rnr_timer_duration(0).count(), 655360);
  EXPECT_EQ(rnr_timer_duration(31).count(), 491520);
  std::uint8_t timer = rnr_timer_for(1000ms);
  EXPECT_LE(rnr_timer_duration(timer) * 6, 1000ms);
  std::uint8_t retries = rnr_retry_for(1000ms, timer);
  EXPECT_GE(retries, 1);
  EXPECT_LE(retries, 6) << "7 means: retry forever";
  EXPECT_LE(rnr_timer_duration(timer) * retries, 1000ms);
  EXPECT_EQ(rnr_retry_for(1ms, 0), 1) << "at least one retry";
}

Gid ipv4_gid(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  return Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}
Gid link_local() { return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55}; }

TEST(VerbsGid, PrefersIpv4MappedRoceV2) {
  std::vector<GidEntry> gids = {{0, link_local(), GidType::RoCEv1},
                                {1, link_local(), GidType::RoCEv2},
                                {2, ipv4_gid(169, 254, 7, 1), GidType::RoCEv1},
                                {3, ipv4_gid(169, 254, 7, 1), GidType::RoCEv2}};
  auto chosen = choose_gid(gids, /*ethernet=*/true);
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->index, 3u);
  EXPECT_EQ(ipv4_of(chosen->gid), 0xa9fe0701u);
}

TEST(VerbsGid, FallsBackToAnyRoceV2ThenV1) {
  std::vector<GidEntry> v1_and_v2 = {{0, link_local(), GidType::RoCEv1}, {1, link_local(), GidType::RoCEv2}};
  EXPECT_EQ(choose_gid(v1_and_v2, true)->index, 1u);
  std::vector<GidEntry> v1_only = {{0, Gid{}, GidType::RoCEv1}, {1, link_local(), GidType::RoCEv1}};
  EXPECT_EQ(choose_gid(v1_only, true)->index, 1u) << "zero GIDs are never chosen";
  EXPECT_FALSE(choose_gid(std::vector<GidEntry>{}, true));
  std::vector<GidEntry> ib = {{0, link_local(), GidType::IB}};
  EXPECT_EQ(choose_gid(ib, false)->index, 0u);
}

TEST(VerbsGid, Text) {
  EXPECT_EQ(gid_text(ipv4_gid(169, 254, 7, 1)), "0000:0000:0000:0000:0000:ffff:a9fe:0701");
  EXPECT_FALSE(ipv4_of(link_local()));
  EXPECT_EQ(to_string(GidType::RoCEv2), "RoCE v2");
}

QpPlan sample_plan() {
  QpPlan plan;
  plan.port = 1;
  plan.sgid_index = 3;
  plan.local.psn = 0x123456;
  plan.local.timeout = 16;
  plan.local.retry_cnt = 7;
  plan.local.rnr_timer = 20;
  plan.local.max_rd_atomic = 16;
  plan.peer.qpn = 0x11;
  plan.peer.psn = 0xabcdef;
  plan.peer.gid = ipv4_gid(169, 254, 1, 2);
  plan.agreed = {IBV_MTU_1024, 8};
  plan.rnr_retry = 5;
  return plan;
}

TEST(VerbsQpAttrs, InitRtrRtsCarryTheNegotiatedValues) {
  auto init = init_transition(1);
  EXPECT_EQ(init.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  EXPECT_TRUE(init.attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC);

  QpPlan plan = sample_plan();
  auto rtr = rtr_transition(plan);
  EXPECT_EQ(rtr.attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(rtr.attr.dest_qp_num, 0x11u);
  EXPECT_EQ(rtr.attr.rq_psn, 0xabcdefu) << "we receive what the peer sends from its PSN";
  EXPECT_EQ(rtr.attr.min_rnr_timer, 20);
  EXPECT_EQ(rtr.attr.max_dest_rd_atomic, 16);
  EXPECT_EQ(rtr.attr.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 1);
  EXPECT_EQ(rtr.attr.ah_attr.grh.dgid.raw[15], 2);
  EXPECT_TRUE(rtr.mask & IBV_QP_AV);
  EXPECT_TRUE(rtr.mask & IBV_QP_PATH_MTU);

  auto rts = rts_transition(plan);
  EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(rts.attr.sq_psn, 0x123456u);
  EXPECT_EQ(rts.attr.timeout, 16);
  EXPECT_EQ(rts.attr.retry_cnt, 7);
  EXPECT_EQ(rts.attr.rnr_retry, 5);
  EXPECT_EQ(rts.attr.max_rd_atomic, 8);
  EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC);
  EXPECT_EQ(error_transition().attr.qp_state, IBV_QPS_ERR);
}

}  // namespace
}  // namespace rdmakit::verbs_impl
