// The RC rules of src/core: check_chain()/check_recv() (what post refuses) and RcState (the first failure,
// flushes behind it, which ids wait() may wait for).
#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "core/rc_check.hpp"
#include "core/rc_state.hpp"

namespace rdmakit {
namespace {

Capabilities caps(bool refuse_misaligned = false) {
  return Capabilities{
      .max_message_size = 1 << 20, .max_sge = 4, .misaligned_atomic_refused_at_post = refuse_misaligned};
}

constexpr std::uint64_t kEpoch = 77;

Segment seg(std::uint32_t length) { return Segment{.addr = 0x1000, .length = length, .lkey = 1}; }

Errc refused(std::span<const WorkRequest> chain, const Capabilities& c = caps()) {
  auto ok = check_chain(chain, c, kEpoch);
  EXPECT_FALSE(ok.has_value());
  if (ok) return Errc{};
  EXPECT_FALSE(ok.error().message().empty());
  return ok.error().code();
}

TEST(CheckChain, AcceptsWellFormedRequests) {
  Segment s = seg(64), eight = seg(8);
  std::vector<WorkRequest> chain{
      {.opcode = Opcode::Write,
       .local = std::span(&s, 1),
       .remote = {.addr = 8, .rkey = 1, .owner_epoch = kEpoch}},
      {.opcode = Opcode::Read, .local = std::span(&s, 1), .remote = {.addr = 8, .rkey = 1, .owner_epoch = 0}},
      {.opcode = Opcode::FetchAdd, .local = std::span(&eight, 1), .remote = {.addr = 16, .rkey = 1}},
      {.opcode = Opcode::Send, .local = {}},
  };
  EXPECT_TRUE(check_chain(chain, caps(true), kEpoch).has_value());
}

TEST(CheckChain, RefusesMalformedRequests) {
  EXPECT_EQ(refused({}), Errc::InvalidArgument);
  WorkRequest recv{.opcode = Opcode::Recv};
  EXPECT_EQ(refused(std::span(&recv, 1)), Errc::InvalidArgument);
  WorkRequest unknown{.opcode = static_cast<Opcode>(42)};
  EXPECT_EQ(refused(std::span(&unknown, 1)), Errc::InvalidArgument);
  std::vector<Segment> five(5, seg(1));
  WorkRequest many{.opcode = Opcode::Write, .local = five};
  EXPECT_EQ(refused(std::span(&many, 1)), Errc::InvalidArgument);
  std::vector<Segment> big(2, seg(1 << 19));
  big.push_back(seg(1));
  WorkRequest large{.opcode = Opcode::Write, .local = big};
  EXPECT_EQ(refused(std::span(&large, 1)), Errc::InvalidArgument);
  Segment seven = seg(7);
  WorkRequest atomic{.opcode = Opcode::CompareSwap, .local = std::span(&seven, 1)};
  EXPECT_EQ(refused(std::span(&atomic, 1)), Errc::InvalidArgument);
  WorkRequest stale{.opcode = Opcode::Write, .remote = {.addr = 0, .rkey = 1, .owner_epoch = kEpoch + 1}};
  EXPECT_EQ(refused(std::span(&stale, 1)), Errc::StaleDescriptor);
  // A SEND has no remote address: its epoch field means nothing.
  WorkRequest send{.opcode = Opcode::Send, .remote = {.owner_epoch = kEpoch + 1}};
  EXPECT_TRUE(check_chain(std::span(&send, 1), caps(), kEpoch).has_value());
}

TEST(CheckChain, OneBadRequestRefusesTheChainAndNamesIt) {
  Segment s = seg(8);
  std::vector<WorkRequest> chain{{.opcode = Opcode::Write, .local = std::span(&s, 1)},
                                 {.opcode = Opcode::RecvWriteImm}};
  auto ok = check_chain(chain, caps(), kEpoch);
  ASSERT_FALSE(ok.has_value());
  EXPECT_NE(ok.error().message().find("request 1"), std::string::npos) << ok.error().message();
}

TEST(CheckChain, MisalignedAtomicFollowsTheCapability) {
  Segment eight = seg(8);
  WorkRequest atomic{
      .opcode = Opcode::FetchAdd, .local = std::span(&eight, 1), .remote = {.addr = 4, .rkey = 1}};
  EXPECT_EQ(refused(std::span(&atomic, 1), caps(true)), Errc::InvalidArgument);
  EXPECT_TRUE(check_chain(std::span(&atomic, 1), caps(false), kEpoch).has_value());
}

TEST(CheckRecv, HonoursMaxSge) {
  std::vector<Segment> four(4, seg(1)), five(5, seg(1));
  EXPECT_TRUE(check_recv(four, caps()).has_value());
  EXPECT_EQ(check_recv(five, caps()).error().code(), Errc::InvalidArgument);
}

TEST(RcState, TheFirstFailureWinsWithItsErrcAndStatus) {
  detail::RcState state(3, 16, 16);
  EXPECT_TRUE(state.health().has_value());
  Completion failed{.id = state.send_id(0), .status = Status::RemoteAccess, .opcode = Opcode::Write};
  EXPECT_TRUE(state.fail(detail::completion_error(failed)));
  EXPECT_FALSE(state.fail(Error(Errc::ConnectionBroken, "the peer closed")));
  auto health = state.health();
  ASSERT_FALSE(health.has_value());
  EXPECT_EQ(health.error().code(), Errc::TransportFailure);
  EXPECT_EQ(health.error().status(), Status::RemoteAccess);
  auto stats = state.stats(PeerInfo{.name = "peer", .address = "127.0.0.1:1"});
  EXPECT_TRUE(stats.failed);
  EXPECT_EQ(stats.peer, "peer (127.0.0.1:1)");
  EXPECT_NE(stats.failure.find(std::string(to_string(Status::RemoteAccess))), std::string::npos)
      << stats.failure;
}

TEST(RcState, PostsBehindAFailureCompleteFlushedAndCount) {
  detail::RcState state(1, 16, 16);
  Segment s = seg(8);
  std::vector<WorkRequest> chain{{.opcode = Opcode::Write, .local = std::span(&s, 1), .signaled = false},
                                 {.opcode = Opcode::Read, .local = std::span(&s, 1)}};
  std::vector<Completion> out;
  auto first = state.post_flushed(chain, [&](const Completion& c) { out.push_back(c); });
  auto recv = state.post_recv_flushed([&](const Completion& c) { out.push_back(c); });
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].id, first);
  EXPECT_EQ(out[1].id, first + 1);
  EXPECT_EQ(out[1].opcode, Opcode::Read);
  EXPECT_EQ(out[2].id, recv);
  for (const Completion& c : out) {
    EXPECT_EQ(c.status, Status::Flushed);
    EXPECT_EQ(c.connection, 1u);
  }
  auto stats = state.stats(PeerInfo{});
  EXPECT_EQ(stats.posted, 3u);
  EXPECT_EQ(stats.completed, 3u);
  EXPECT_EQ(stats.outstanding, 0u);
}

// One pending send as a transport keeps it: an id and an opcode.
struct PendingOp {
  std::uint64_t id;
  Opcode opcode;
};
struct PendingRecv {
  std::uint64_t id;
};

TEST(RcState, EnteringTheErrorStateFlushesInOrderOnce) {
  detail::RcState state(3, 16, 16);
  const std::uint64_t base = state.take_sends(3);
  std::deque<PendingOp> sends{{state.send_id(base), Opcode::Send},
                              {state.send_id(base + 1), Opcode::Write},
                              {state.send_id(base + 2), Opcode::Read}};
  std::deque<PendingRecv> recvs{{state.recv_id(state.take_recv())}};
  std::vector<Completion> out;
  const auto push = [&](const Completion& c) { out.push_back(c); };
  const auto opcode_of = [](const PendingOp& op) { return op.opcode; };
  EXPECT_FALSE(state.in_error());
  ASSERT_TRUE(state.enter_error(Error(Errc::ConnectionBroken, "peer died"), Status::TransportRetryExceeded,
                                sends, opcode_of, push));
  state.flush_recvs(recvs, push);
  EXPECT_TRUE(state.in_error());
  EXPECT_TRUE(sends.empty() && recvs.empty());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].status, Status::TransportRetryExceeded);
  EXPECT_EQ(out[0].opcode, Opcode::Send);
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(out[i].status, Status::Flushed) << i;
  EXPECT_EQ(out[2].opcode, Opcode::Read);
  EXPECT_EQ(out[3].opcode, Opcode::Recv);
  EXPECT_EQ(state.stats(PeerInfo{}).outstanding, 0u);
  // The failure is the head operation's, as verbs reports it, with the cause kept in the message.
  auto health = state.health();
  ASSERT_FALSE(health.has_value());
  EXPECT_EQ(health.error().code(), Errc::TransportFailure) << health.error().describe();
  EXPECT_EQ(health.error().status(), Status::TransportRetryExceeded);
  EXPECT_NE(health.error().message().find("peer died"), std::string::npos) << health.error().message();
  // Once: a second entry touches nothing and the first failure stays.
  sends.push_back({state.send_id(state.take_sends(1)), Opcode::Write});
  EXPECT_FALSE(
      state.enter_error(Error(Errc::ProtocolError, "later"), Status::RemoteAccess, sends, opcode_of, push));
  EXPECT_EQ(sends.size(), 1u);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(state.health().error().status(), Status::TransportRetryExceeded);
}

TEST(RcState, TheHeadRuleKeepsAnOperationsFailureAndIgnoresAFlushedHead) {
  std::vector<Completion> out;
  const auto push = [&](const Completion& c) { out.push_back(c); };
  const auto opcode_of = [](const PendingOp& op) { return op.opcode; };
  {
    detail::RcState state(4, 16, 16);
    std::deque<PendingOp> sends{{state.send_id(state.take_sends(1)), Opcode::Write}};
    // Closed by this side: the head is Flushed, so the failure is the close, not an operation's.
    ASSERT_TRUE(
        state.enter_error(Error(Errc::ConnectionBroken, "closed"), Status::Flushed, sends, opcode_of, push));
    EXPECT_EQ(state.health().error().code(), Errc::ConnectionBroken);
  }
  {
    detail::RcState state(5, 16, 16);
    std::deque<PendingOp> sends{{state.send_id(state.take_sends(1)), Opcode::Write}};
    // Already an operation's failure (TransportFailure): kept as it is.
    Error why(Errc::TransportFailure, "op 7 failed", 0, Status::LocalProtection);
    ASSERT_TRUE(state.enter_error(why, Status::LocalProtection, sends, opcode_of, push));
    EXPECT_EQ(state.health().error().message(), "op 7 failed");
  }
  {
    detail::RcState state(6, 16, 16);
    std::deque<PendingOp> none;
    // Nothing pending: the cause itself is the failure.
    ASSERT_TRUE(state.enter_error(Error(Errc::ConnectionBroken, "peer died"), Status::TransportRetryExceeded,
                                  none, opcode_of, push));
    EXPECT_EQ(state.health().error().code(), Errc::ConnectionBroken);
  }
}

TEST(RcState, ThePostPrologueChecksTheRequestFirstThenClosedThenErrorThenRoom) {
  detail::RcState state(7, 4, 4);
  Segment s = seg(8);
  WorkRequest recv_opcode{.opcode = Opcode::Recv};
  WorkRequest write{.opcode = Opcode::Write, .local = std::span(&s, 1)};
  const auto drop = [](const Completion&) {};
  // Room: the depth counts what is queued plus the chain.
  auto full = state.admit_post(std::span(&write, 1), 4, 4, drop);
  ASSERT_TRUE(full.has_value());
  ASSERT_FALSE(full->has_value());
  EXPECT_EQ(full->error().code(), Errc::ResourceExhausted);
  EXPECT_NE(full->error().message().find("post: send queue full (4 of 4 outstanding"), std::string::npos)
      << full->error().message();
  auto recv_full = state.admit_recv(4, 4, drop);
  ASSERT_TRUE(recv_full.has_value() && !recv_full->has_value());
  EXPECT_NE(recv_full->error().message().find("post_recv: receive queue full"), std::string::npos)
      << recv_full->error().message();
  EXPECT_FALSE(state.admit_post(std::span(&write, 1), 3, 4, drop).has_value()) << "room for one more";
  // In the error state the chain is accepted and flushed, full queue or not.
  std::deque<PendingOp> none;
  state.enter_error(
      Error(Errc::ConnectionBroken, "x"), Status::Flushed, none,
      [](const PendingOp& op) { return op.opcode; }, drop);
  auto flushed = state.admit_post(std::span(&write, 1), 4, 4, drop);
  ASSERT_TRUE(flushed.has_value() && flushed->has_value());
  // Closed: a malformed request is still InvalidArgument, a well-formed one ConnectionBroken.
  state.close();
  EXPECT_EQ(state.check_post(std::span(&recv_opcode, 1), caps(), kEpoch).error().code(),
            Errc::InvalidArgument);
  EXPECT_EQ(state.check_post(std::span(&write, 1), caps(), kEpoch).error().code(), Errc::ConnectionBroken);
  std::vector<Segment> five(5, s);
  EXPECT_EQ(state.check_post_recv(five, caps()).error().code(), Errc::InvalidArgument);
  EXPECT_EQ(state.check_post_recv(std::span(&s, 1), caps()).error().code(), Errc::ConnectionBroken);
}

TEST(RcState, WaitableIdsAreIssuedOnesNotYetTaken) {
  detail::RcState state(2, 8, 8);
  const auto sequence = state.take_sends(2);
  const auto id = state.send_id(sequence);
  EXPECT_TRUE(state.check_waitable(id).has_value());
  EXPECT_TRUE(state.check_waitable(id + 1).has_value());
  EXPECT_EQ(state.check_waitable(id + 2).error().code(), Errc::InvalidArgument);            // never issued
  EXPECT_EQ(state.check_waitable(state.recv_id(0)).error().code(), Errc::InvalidArgument);  // no receive yet
  detail::RcState other(5, 8, 8);
  EXPECT_EQ(state.check_waitable(other.send_id(0)).error().code(), Errc::InvalidArgument);  // not ours
  state.taken(id);
  EXPECT_EQ(state.check_waitable(id).error().code(), Errc::InvalidArgument);
  EXPECT_TRUE(state.check_waitable(id + 1).has_value());
}

// Beyond the ring of taken completions (2 x the deeper queue, 16 here) an id is done once counted so: then
// only the queue can say whether its completion is still there, and wait() looks once instead of waiting.
TEST(RcState, AnIdOlderThanTheRingIsWaitableOnlyIfQueuedOnceDone) {
  using Waitable = detail::RcState::Waitable;
  detail::RcState state(2, 8, 8);
  const auto oldest = state.send_id(state.take_sends(1));
  state.take_sends(100);
  EXPECT_EQ(*state.check_waitable(oldest), Waitable::Yes);  // not counted done: it may still complete
  state.completed(oldest);
  EXPECT_EQ(*state.check_waitable(oldest), Waitable::IfQueued);
  EXPECT_EQ(*state.check_waitable(oldest + 99), Waitable::Yes);  // recent: the ring answers
  state.taken(oldest + 99);
  EXPECT_EQ(state.check_waitable(oldest + 99).error().code(), Errc::InvalidArgument);
  // Receives alike.
  const auto first_recv = state.recv_id(state.take_recv());
  for (int i = 0; i < 40; ++i) state.take_recv();
  EXPECT_EQ(*state.check_waitable(first_recv), Waitable::Yes);
  state.completed(first_recv);
  EXPECT_EQ(*state.check_waitable(first_recv), Waitable::IfQueued);
}

}  // namespace
}  // namespace rdmakit
