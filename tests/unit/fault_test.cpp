// The fault transport over tcp: each injected fault must look exactly like the RDMA failure it stands
// for (status of the failed operation, Flushed behind it, ConnectionBroken afterwards, target bytes
// untouched, bounded time).
#include "rdmakit/fault.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "rdmakit/context.hpp"
#include "support/test_support.hpp"
#include "transport/fault/rule_book.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;
using fault::Rule;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kSize = 1 << 16;

// Side a is the fault context (the initiator); side b is plain tcp (the target).
class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override { open({}); }

  void open(Options options) {
    options.transport = "fault:tcp";
    options.name = "fault-a";
    auto a = Context::open(options);
    ASSERT_TRUE(a.has_value()) << a.error().describe();
    a_ = *a;
    options.transport = "tcp";
    options.name = "fault-b";
    auto b = Context::open(options);
    ASSERT_TRUE(b.has_value()) << b.error().describe();
    b_ = *b;
    injector_ = fault::injector(*a_);
    ASSERT_NE(injector_, nullptr);
    local_.assign(kSize, std::byte{0});
    target_.assign(kSize, std::byte{0});
    auto local_mr = a_->register_memory(local_.data(), kSize, Access::All);
    ASSERT_TRUE(local_mr.has_value()) << local_mr.error().describe();
    local_mr_ = *local_mr;
    auto target_mr = b_->register_memory(target_.data(), kSize, Access::All);
    ASSERT_TRUE(target_mr.has_value()) << target_mr.error().describe();
    target_mr_ = *target_mr;
    remote_ = target_mr_->descriptor();
    connect_pair();
  }

  void connect_pair() {
    auto listener = b_->listen();
    ASSERT_TRUE(listener.has_value()) << listener.error().describe();
    auto connecting = std::async(std::launch::async, [&] { return a_->connect((*listener)->address()); });
    auto accepted = (*listener)->accept(5s);
    auto connected = connecting.get();
    ASSERT_TRUE(connected.has_value()) << connected.error().describe();
    ASSERT_TRUE(accepted.has_value()) << accepted.error().describe();
    conn_ = *connected;
    peer_ = *accepted;
  }

  Completion wait(std::uint64_t id, std::chrono::nanoseconds timeout = 5s) {
    auto done = conn_->wait(id, timeout);
    EXPECT_TRUE(done.has_value()) << "operation " << id << ": " << done.error().describe();
    return done.value_or(Completion{.id = id, .status = Status::GeneralError});
  }

  // The next `n` completions of a's send queue, in the order the queue gives them.
  std::vector<Completion> next_completions(std::size_t n, std::chrono::nanoseconds timeout = 5s) {
    std::vector<Completion> got;
    auto deadline = Clock::now() + timeout;
    std::array<Completion, 16> batch;
    while (got.size() < n && Clock::now() < deadline) {
      auto r = conn_->send_cq().wait(std::span(batch).first(std::min(batch.size(), n - got.size())), 10ms);
      EXPECT_TRUE(r.has_value());
      if (!r) break;
      got.insert(got.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(*r));
    }
    EXPECT_EQ(got.size(), n);
    return got;
  }

  // The connection is in the error state: health() reports the first failure (an injected operation
  // failure as TransportFailure with its status, a disconnect as ConnectionBroken), and whatever is posted
  // now is accepted and completes Flushed, as on a QP in the error state.
  void expect_broken() {
    auto health = conn_->health();
    ASSERT_FALSE(health.has_value());
    if (health.error().code() == Errc::TransportFailure)
      EXPECT_NE(health.error().status(), Status::Success) << health.error().describe();
    else
      EXPECT_EQ(health.error().code(), Errc::ConnectionBroken) << health.error().describe();
    auto post = conn_->write(local_mr_->slice(0, 8), remote_.at(0));
    ASSERT_TRUE(post.has_value()) << post.error().describe();
    auto again = conn_->read(local_mr_->slice(0, 8), remote_.at(0));  // sticky
    ASSERT_TRUE(again.has_value()) << again.error().describe();
    auto recv = conn_->post_recv(local_mr_->slice(0, 8));
    ASSERT_TRUE(recv.has_value()) << recv.error().describe();
    for (auto id : {*post, *again, *recv}) {
      auto done = conn_->wait(id, 5s);
      ASSERT_TRUE(done.has_value()) << done.error().describe();
      EXPECT_EQ(done->status, Status::Flushed);
    }
    auto later = conn_->health();
    ASSERT_FALSE(later.has_value());
    EXPECT_EQ(later.error().code(), health.error().code()) << "the first failure was replaced";
    EXPECT_TRUE(conn_->stats().failed);
  }

  std::uint64_t write(std::size_t offset, std::uint32_t length, std::uint32_t seed, bool signaled = true) {
    testing::fill_pattern(local_.data() + offset, length, seed);
    auto id = conn_->write(local_mr_->slice(offset, length), remote_.at(offset), signaled);
    EXPECT_TRUE(id.has_value()) << id.error().describe();
    return id.value_or(0);
  }
  bool target_holds(std::size_t offset, std::size_t length, std::uint32_t seed) const {
    return testing::find_pattern_mismatch(target_.data() + offset, length, seed) == length;
  }
  bool target_zero(std::size_t offset, std::size_t length) const {
    for (std::size_t i = 0; i < length; ++i)
      if (target_[offset + i] != std::byte{0}) return false;
    return true;
  }

  std::shared_ptr<Context> a_, b_;
  fault::Injector* injector_ = nullptr;
  std::vector<std::byte> local_, target_;
  std::shared_ptr<MemoryRegion> local_mr_, target_mr_;
  RemoteRegion remote_;
  std::shared_ptr<Connection> conn_, peer_;
};

TEST_F(FaultTest, PassesEverythingThroughWithoutRules) {
  EXPECT_EQ(a_->transport(), "fault:tcp");
  EXPECT_EQ(fault::injector(*b_), nullptr);
  // Peers see the inner context's identity, which the fault context reports as its own.
  EXPECT_EQ(peer_->peer().epoch, a_->identity().epoch);
  EXPECT_EQ(peer_->peer().name, "fault-a");

  auto id = write(0, 4096, 1);
  auto done = wait(id);
  EXPECT_EQ(done.status, Status::Success);
  EXPECT_EQ(done.connection, conn_->number());
  EXPECT_TRUE(target_holds(0, 4096, 1));

  testing::fill_pattern(target_.data() + 8192, 100, 2);
  auto read = conn_->read(local_mr_->slice(20000, 100), remote_.at(8192));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(wait(*read).status, Status::Success);
  EXPECT_EQ(testing::find_pattern_mismatch(local_.data() + 20000, 100, 2), 100u);

  // Unsignaled success: no completion; the signaled one behind it does complete.
  write(100, 8, 3, /*signaled=*/false);
  auto last = write(200, 8, 4);
  auto both = next_completions(1);
  ASSERT_EQ(both.size(), 1u);
  EXPECT_EQ(both[0].id, last);

  // Two-sided traffic.
  auto recv = peer_->post_recv(target_mr_->slice(30000, 64));
  ASSERT_TRUE(recv.has_value());
  testing::fill_pattern(local_.data() + 300, 64, 5);
  auto send = conn_->send(local_mr_->slice(300, 64));
  ASSERT_TRUE(send.has_value());
  EXPECT_EQ(wait(*send).status, Status::Success);
  auto received = peer_->wait(*recv, 5s);
  ASSERT_TRUE(received.has_value());
  EXPECT_EQ(received->bytes, 64u);
  EXPECT_TRUE(target_holds(30000, 64, 5));
  EXPECT_TRUE(conn_->health().has_value());
  EXPECT_EQ(injector_->injected(), 0u);
}

TEST_F(FaultTest, FailedWriteLeavesTargetUntouchedFlushesTheRestAndBreaks) {
  ASSERT_TRUE(injector_
                  ->add({.action = Rule::Action::Fail,
                         .opcode = Opcode::Write,
                         .status = Status::RemoteAccess,
                         .skip = 1})
                  .has_value());
  auto recv = conn_->post_recv(local_mr_->slice(60000, 64));  // a receive flushes with the connection
  ASSERT_TRUE(recv.has_value());
  auto first = write(0, 1024, 11);
  auto failed = write(1024, 1024, 12);
  auto behind = write(2048, 1024, 13);
  auto read_behind = conn_->read(local_mr_->slice(40000, 64), remote_.at(0));
  ASSERT_TRUE(read_behind.has_value());

  auto got = next_completions(4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].id, first);
  EXPECT_EQ(got[0].status, Status::Success);
  EXPECT_EQ(got[1].id, failed);
  EXPECT_EQ(got[1].status, Status::RemoteAccess);
  EXPECT_EQ(got[1].opcode, Opcode::Write);
  EXPECT_EQ(got[1].connection, conn_->number());
  EXPECT_EQ(got[2].id, behind);
  EXPECT_EQ(got[2].status, Status::Flushed);
  EXPECT_EQ(got[3].id, *read_behind);
  EXPECT_EQ(got[3].status, Status::Flushed);
  EXPECT_EQ(got[3].opcode, Opcode::Read);

  EXPECT_TRUE(target_holds(0, 1024, 11));
  EXPECT_TRUE(target_zero(1024, 2048)) << "a failed or flushed WRITE touched the target";
  auto flushed_recv = conn_->wait(*recv, 5s);
  ASSERT_TRUE(flushed_recv.has_value()) << flushed_recv.error().describe();
  EXPECT_EQ(flushed_recv->status, Status::Flushed);
  expect_broken();
  EXPECT_EQ(injector_->injected(), 1u);
  auto stats = conn_->stats();
  EXPECT_EQ(stats.outstanding, 0u);
  EXPECT_FALSE(stats.failure.empty());
}

// A synthetic failure never overtakes the completions of operations posted before it.
TEST_F(FaultTest, FailureWaitsForEarlierOperations) {
  ASSERT_TRUE(
      injector_
          ->add({.action = Rule::Action::Fail, .opcode = Opcode::FetchAdd, .status = Status::RemoteOperation})
          .has_value());
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(write(static_cast<std::size_t>(i) * 4096, 4096, 20 + i));
  write(40000, 8, 30, /*signaled=*/false);  // unsignaled: nothing shows on success
  auto atomic = conn_->fetch_add(local_mr_->slice(50000, 8), remote_.at(48000), 5);
  ASSERT_TRUE(atomic.has_value());
  auto got = next_completions(9);
  ASSERT_EQ(got.size(), 9u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(got[i].id, ids[i]);
    EXPECT_EQ(got[i].status, Status::Success);
  }
  EXPECT_EQ(got[8].id, *atomic);
  EXPECT_EQ(got[8].status, Status::RemoteOperation);
  EXPECT_EQ(got[8].opcode, Opcode::FetchAdd);
  for (int i = 0; i < 8; ++i)
    EXPECT_TRUE(target_holds(static_cast<std::size_t>(i) * 4096, 4096, 20 + i)) << i;
  EXPECT_TRUE(target_holds(40000, 8, 30));
  EXPECT_TRUE(target_zero(48000, 8)) << "the failed atomic reached the target";
  expect_broken();
}

TEST_F(FaultTest, FailureInsideAChain) {
  ASSERT_TRUE(injector_->add({.action = Rule::Action::Fail, .status = Status::LocalProtection, .skip = 1})
                  .has_value());
  std::array<Segment, 3> segments;
  std::array<WorkRequest, 3> chain;
  for (std::size_t i = 0; i < 3; ++i) {
    testing::fill_pattern(local_.data() + i * 1000, 1000, 40 + static_cast<std::uint32_t>(i));
    segments[i] = local_mr_->slice(i * 1000, 1000);
    chain[i] = WorkRequest{
        .opcode = Opcode::Write, .local = std::span(&segments[i], 1), .remote = remote_.at(i * 1000)};
  }
  auto first = conn_->post(chain);
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  auto got = next_completions(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, *first);
  EXPECT_EQ(got[0].status, Status::Success);
  EXPECT_EQ(got[1].id, *first + 1);  // consecutive ids, as for any chain
  EXPECT_EQ(got[1].status, Status::LocalProtection);
  EXPECT_EQ(got[2].id, *first + 2);
  EXPECT_EQ(got[2].status, Status::Flushed);
  EXPECT_TRUE(target_holds(0, 1000, 40));
  EXPECT_TRUE(target_zero(1000, 2000));
  expect_broken();
}

TEST_F(FaultTest, DelayHoldsTheCompletionAndKeepsOrder) {
  ASSERT_TRUE(
      injector_->add({.action = Rule::Action::Delay, .opcode = Opcode::Write, .delay = 200ms}).has_value());
  auto start = Clock::now();
  auto delayed = write(0, 512, 50);
  auto behind = conn_->read(local_mr_->slice(10000, 8), remote_.at(0));
  ASSERT_TRUE(behind.has_value());
  auto got = next_completions(2);
  auto took = Clock::now() - start;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, delayed);
  EXPECT_EQ(got[0].status, Status::Success);
  EXPECT_EQ(got[1].id, *behind);  // not overtaken by the fast read behind it
  EXPECT_EQ(got[1].status, Status::Success);
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(target_holds(0, 512, 50));
  EXPECT_TRUE(conn_->health().has_value());
  // Spent after one: the next write is fast again.
  start = Clock::now();
  EXPECT_EQ(wait(write(600, 8, 51)).status, Status::Success);
  EXPECT_LT(Clock::now() - start, 150ms);
}

TEST_F(FaultTest, DropFailsWithRetryExceededWithinTheTimeout) {
  open({.timeout = 300ms});
  ASSERT_TRUE(injector_->add({.action = Rule::Action::Drop, .opcode = Opcode::Write}).has_value());
  auto start = Clock::now();
  auto dropped = write(0, 4096, 60);
  auto behind = conn_->read(local_mr_->slice(20000, 8), remote_.at(8192));
  ASSERT_TRUE(behind.has_value());
  auto got = next_completions(2, 5s);
  auto took = Clock::now() - start;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, dropped);
  EXPECT_EQ(got[0].status, Status::TransportRetryExceeded);
  EXPECT_EQ(got[1].id, *behind);
  EXPECT_EQ(got[1].status, Status::Flushed);
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 300ms + 1500ms);
  EXPECT_TRUE(target_zero(0, 4096));
  expect_broken();
}

TEST_F(FaultTest, DisconnectFailsPendingOperationsOnBothSides) {
  auto peer_recv = peer_->post_recv(target_mr_->slice(0, 64));  // pending at the peer
  ASSERT_TRUE(peer_recv.has_value());
  auto recv = conn_->post_recv(local_mr_->slice(60000, 64));
  ASSERT_TRUE(recv.has_value());
  ASSERT_TRUE(injector_->add({.action = Rule::Action::Disconnect, .opcode = Opcode::Send}).has_value());
  auto send = conn_->send(local_mr_->slice(0, 64));
  ASSERT_TRUE(send.has_value()) << send.error().describe();
  EXPECT_EQ(wait(*send).status, Status::Flushed);
  auto local_recv = conn_->wait(*recv, 5s);
  ASSERT_TRUE(local_recv.has_value());
  EXPECT_EQ(local_recv->status, Status::Flushed);
  expect_broken();
  // The peer's connection vanished under it: its pending receive fails in bounded time.
  auto at_peer = peer_->wait(*peer_recv, 10s);
  ASSERT_TRUE(at_peer.has_value()) << at_peer.error().describe();
  EXPECT_NE(at_peer->status, Status::Success);
}

TEST_F(FaultTest, CloseFlushesAQueuedInjection) {
  open({.timeout = 10s});
  ASSERT_TRUE(injector_->add({.action = Rule::Action::Drop}).has_value());
  auto dropped = write(0, 8, 70);
  auto start = Clock::now();
  conn_->close();
  auto done = wait(dropped);
  EXPECT_EQ(done.status, Status::Flushed);
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST_F(FaultTest, OnlyTheMatchingConnectionIsHurt) {
  auto first = conn_;
  connect_pair();
  auto second = conn_;
  ASSERT_NE(first->number(), second->number());
  ASSERT_TRUE(
      injector_->add({.action = Rule::Action::Fail, .connection = first->number(), .count = 0}).has_value());
  auto ok = second->write(local_mr_->slice(0, 8), remote_.at(0));
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(second->wait(*ok, 5s)->status, Status::Success);
  auto bad = first->write(local_mr_->slice(0, 8), remote_.at(8));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(first->wait(*bad, 5s)->status, Status::GeneralError);
  EXPECT_FALSE(first->health().has_value());
  EXPECT_TRUE(second->health().has_value());
  auto diagnostics = a_->diagnostics();
  EXPECT_EQ(diagnostics.size(), 2u);
}

TEST_F(FaultTest, ConnectRules) {
  ASSERT_TRUE(injector_->add({.action = Rule::Action::Fail, .connect = true}).has_value());
  auto listener = b_->listen();
  ASSERT_TRUE(listener.has_value());
  auto refused = a_->connect((*listener)->address());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Errc::ConnectionRefused);

  injector_->clear();
  ASSERT_TRUE(injector_->add({.action = Rule::Action::Delay, .connect = true, .delay = 150ms}).has_value());
  auto start = Clock::now();
  connect_pair();
  EXPECT_GE(Clock::now() - start, 150ms);
  EXPECT_EQ(wait(write(0, 8, 80)).status, Status::Success);

  ASSERT_TRUE(injector_->add({.action = Rule::Action::Disconnect, .connect = true}).has_value());
  connect_pair();
  expect_broken();
}

// Many threads posting while a rule fires: every accepted operation completes exactly once, in order,
// as successes, then the injected failure, then flushes.
TEST_F(FaultTest, ConcurrentPostersSeeOneConsistentFailure) {
  ASSERT_TRUE(injector_->add({.action = Rule::Action::Fail, .status = Status::RemoteAccess, .skip = 100})
                  .has_value());
  std::atomic<std::size_t> accepted{0};
  std::vector<std::thread> posters;
  for (int t = 0; t < 3; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        auto id = conn_->write(local_mr_->slice(static_cast<std::size_t>(t) * 64, 64),
                               remote_.at(static_cast<std::size_t>(t) * 64));
        if (!id) {
          EXPECT_EQ(id.error().code(), Errc::ConnectionBroken);
          break;
        }
        ++accepted;
      }
    });
  }
  for (auto& poster : posters) poster.join();
  auto got = next_completions(accepted.load(), 10s);
  ASSERT_EQ(got.size(), accepted.load());
  std::size_t i = 0;
  for (; i < got.size() && got[i].status == Status::Success; ++i) {
  }
  EXPECT_EQ(i, 100u);
  ASSERT_LT(i, got.size());
  EXPECT_EQ(got[i].status, Status::RemoteAccess);
  for (++i; i < got.size(); ++i) EXPECT_EQ(got[i].status, Status::Flushed) << i;
  for (std::size_t k = 1; k < got.size(); ++k) EXPECT_LT(got[k - 1].id, got[k].id);
  std::array<Completion, 4> extra;
  EXPECT_EQ(conn_->send_cq().poll(extra), 0u);
}

TEST(FaultInjector, SkipCountAndValidation) {
  fault::Injector rules;
  auto& injector = detail::FaultRuleBook::of(rules);
  ASSERT_TRUE(injector.add({.action = Rule::Action::Fail, .opcode = Opcode::Read, .skip = 2, .count = 2})
                  .has_value());
  std::vector<bool> fired;
  for (int i = 0; i < 6; ++i) fired.push_back(injector.match(Opcode::Read, 1).has_value());
  EXPECT_EQ(fired, (std::vector<bool>{false, false, true, true, false, false}));
  EXPECT_FALSE(injector.match(Opcode::Write, 1).has_value());
  EXPECT_FALSE(injector.match(std::nullopt, 0).has_value());  // not a connect rule
  EXPECT_EQ(injector.injected(), 2u);

  ASSERT_TRUE(injector.add({.action = Rule::Action::Drop, .connection = 7, .count = 0}).has_value());
  EXPECT_FALSE(injector.match(Opcode::Write, 6).has_value());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(injector.match(Opcode::Send, 7)->action, Rule::Action::Drop);
  injector.clear();
  EXPECT_FALSE(injector.match(Opcode::Send, 7).has_value());
  EXPECT_EQ(injector.injected(), 7u);
  EXPECT_EQ(rules.injected(), 7u);  // the public view of the same book

  EXPECT_FALSE(injector.add({.action = Rule::Action::Fail, .status = Status::Success}).has_value());
  EXPECT_FALSE(injector.add({.action = Rule::Action::Delay}).has_value());
  EXPECT_FALSE(injector.add({.action = Rule::Action::Fail, .opcode = Opcode::Recv}).has_value());
  EXPECT_FALSE(
      injector.add({.action = Rule::Action::Fail, .opcode = Opcode::Write, .connect = true}).has_value());
}

}  // namespace
}  // namespace rdmakit
