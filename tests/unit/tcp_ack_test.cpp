// Delayed ACKs on tcp (src/transport/tcp/responder.cpp, "Delayed ACKs"): while a thread polls and traffic
// goes both ways, the ACK of the peer's WRITEs and SENDs rides on our next request instead of being a frame
// of its own. These cases check that it does ride, that it is never held for long when no request of ours
// follows (the target keeps polling, or stops polling without sleeping), and that a receiver that answers
// and then closes right after a SEND still acknowledges it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "rdmakit/rdmakit.hpp"

namespace rdmakit {
namespace {

// tcp's own counter `name` (a named transport counter of ConnectionStats); a missing one fails the test.
std::uint64_t counter(const ConnectionStats& stats, const char* name) {
  auto value = stats.counter(name);
  EXPECT_TRUE(value.has_value()) << "tcp keeps no counter " << name;
  return value.value_or(0);
}

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Access kRegionAccess = Access::LocalWrite | Access::RemoteWrite;
// Each side's region: [0, 8) what it writes, [8, 16) where the peer's WRITE lands.
constexpr std::size_t kOut = 0, kIn = 8;

struct Side {
  std::shared_ptr<Context> context;
  std::shared_ptr<Connection> connection;
  std::shared_ptr<MemoryRegion> region;

  // The peer's WRITE lands here while we look, written by whichever thread reads the socket, as a NIC
  // writes memory an application spins on (write_lat does this). That is RDMA's model, not C++'s: the load
  // is kept out of ThreadSanitizer's view, and the WRITE's 8 bytes are one aligned store or less apart.
  __attribute__((no_sanitize("thread"))) std::uint64_t incoming() const {
    return *reinterpret_cast<const volatile std::uint64_t*>(static_cast<std::byte*>(region->data()) + kIn);
  }
  // Drives progress the way a busy-polling application does: polls the send queue.
  void poll() const {
    Completion batch[8];
    for (std::size_t n; (n = connection->send_cq().poll(batch)) > 0;)
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(batch[i].status, Status::Success);
  }
  // Polls until the peer's WRITE put `value` in [kIn, kIn + 8); false after 10 s.
  bool poll_until_incoming(std::uint64_t value) const {
    const auto deadline = Clock::now() + 10s;
    while (incoming() != value) {
      poll();
      if (Clock::now() > deadline) return false;
    }
    return true;
  }
  // WRITEs `value` into the peer's [kIn, kIn + 8).
  Result<std::uint64_t> write(std::uint64_t value, const RemoteRegion& peer, bool signaled) const {
    std::memcpy(static_cast<std::byte*>(region->data()) + kOut, &value, 8);
    return connection->write(region->slice(kOut, 8), peer.at(kIn), signaled);
  }
};

class TcpAck : public ::testing::Test {
 protected:
  void SetUp() override {
    // Polling applications: a waiter must not go to sleep (that ends the polling lease at once).
    client_.context = Context::open({.transport = "tcp", .wait_mode = WaitMode::Spin}).value();
    server_.context = Context::open({.transport = "tcp", .wait_mode = WaitMode::Spin}).value();
    connect();
  }

  void connect() {
    auto listener = server_.context->listen().value();
    std::thread acceptor([&] { server_.connection = listener->accept(10s).value_or(nullptr); });
    client_.connection = client_.context->connect(listener->address()).value();
    acceptor.join();
    ASSERT_TRUE(server_.connection);
    client_.region = client_.context->allocate(16, kRegionAccess).value();
    server_.region = server_.context->allocate(16, kRegionAccess).value();
    client_view_ = client_.region->descriptor();
    server_view_ = server_.region->descriptor();
  }

  // `rounds` WRITE ping-pongs, both sides polling; the server answers on a thread. Values 1..rounds.
  void ping_pong(std::uint64_t first, std::uint64_t rounds) {
    std::thread responder([&] {
      for (std::uint64_t v = first; v < first + rounds; ++v) {
        ASSERT_TRUE(server_.poll_until_incoming(v)) << "ping " << v;
        ASSERT_TRUE(server_.write(v, client_view_, v % 16 == 0).has_value());
      }
    });
    for (std::uint64_t v = first; v < first + rounds; ++v) {
      ASSERT_TRUE(client_.write(v, server_view_, v % 16 == 0).has_value());
      ASSERT_TRUE(client_.poll_until_incoming(v)) << "pong " << v;
    }
    responder.join();
  }

  Side client_, server_;
  RemoteRegion client_view_, server_view_;
};

TEST_F(TcpAck, APollingPingPongCarriesItsAcksOnRequests) {
  constexpr std::uint64_t kRounds = 2000;
  ping_pong(1, kRounds);
  // Every WRITE landed (the last value on both sides) and completed: nothing outstanding once polled.
  EXPECT_EQ(client_.incoming(), kRounds);
  EXPECT_EQ(server_.incoming(), kRounds);
  const auto client = client_.connection->stats();
  const auto server = server_.connection->stats();
  // Each side ACKs the other's WRITE with its own next one. A round whose answer is late (the thread was
  // preempted for more than the ACK delay) sends a frame instead: allow that for half of them.
  EXPECT_GT(counter(server, "acks_on_requests"), kRounds / 2)
      << "ACK frames " << counter(server, "ack_frames");
  EXPECT_GT(counter(client, "acks_on_requests"), kRounds / 2)
      << "ACK frames " << counter(client, "ack_frames");
  EXPECT_LT(counter(server, "ack_frames") + counter(server, "acks_on_requests"), kRounds + 1);
  EXPECT_TRUE(client_.connection->health().has_value());
  EXPECT_TRUE(server_.connection->health().has_value());
}

TEST_F(TcpAck, AnAckWaitingForARequestStillComesWhenTheTargetKeepsPollingButSendsNothing) {
  ping_pong(1, 50);  // both sides have sent requests: the server's ACKs may wait for one
  const auto start = Clock::now();
  auto id = client_.write(1000, server_view_, /*signaled=*/true).value();
  std::atomic<bool> done{false};
  std::thread target([&] {
    while (!done.load()) server_.poll();  // polls on, answers nothing
  });
  auto completion = client_.connection->wait(id, 10s);
  const auto took = Clock::now() - start;
  done.store(true);
  target.join();
  ASSERT_TRUE(completion.has_value()) << completion.error().message();
  EXPECT_EQ(completion->status, Status::Success);
  EXPECT_EQ(server_.incoming(), 1000u);
  // The ACK waits kAckDelayNs (20 us) for a request; far below the silent-peer timeout it must beat.
  EXPECT_LT(took, 500ms);
}

TEST_F(TcpAck, AnAckWaitingForARequestStillComesWhenTheTargetStopsPolling) {
  int deferred = 0;
  for (std::uint64_t attempt = 0; attempt < 5; ++attempt) {
    const std::uint64_t base = 1 + attempt * 100;
    ping_pong(base, 20);
    const auto start = Clock::now();
    auto id = client_.write(base + 50, server_view_, /*signaled=*/true).value();
    // The server polls until the WRITE is in (its poll read it, so its ACK waits for a request), then does
    // something else: it neither polls nor sleeps nor sends. The engine takes the input back when the
    // polling lease runs out (1 ms) and sends the ACK.
    ASSERT_TRUE(server_.poll_until_incoming(base + 50));
    const auto frames_then = counter(server_.connection->stats(), "ack_frames");
    auto completion = client_.connection->wait(id, 10s);
    const auto took = Clock::now() - start;
    ASSERT_TRUE(completion.has_value()) << completion.error().message();
    EXPECT_EQ(completion->status, Status::Success);
    EXPECT_LT(took, 500ms);
    // Deferred: no frame when the poll read the WRITE, one frame since (the engine's, at the lease's end).
    // (On a slow run the lease may have ended before the WRITE came: then the engine ACKed it at once.)
    if (counter(server_.connection->stats(), "ack_frames") == frames_then + 1) ++deferred;
  }
  EXPECT_GT(deferred, 0) << "no attempt had its ACK wait for a request";
}

TEST_F(TcpAck, AReceiverThatClosesRightAfterAReceiveStillAcknowledgesIt) {
  // The receiver has been sending too, so the ACK of the last SEND waits for a request of its; close()
  // must send it: the sender's SEND was delivered and must not fail.
  auto in = server_.context->allocate(8, Access::LocalWrite).value();
  int deferred = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (attempt > 0) connect();
    auto recv_id = server_.connection->post_recv(in->whole().value()).value();
    ping_pong(1, 20);
    const auto frames_before = counter(server_.connection->stats(), "ack_frames");
    auto send_id = client_.connection->send(client_.region->slice(kOut, 8)).value();
    const auto deadline = Clock::now() + 10s;
    for (;;) {  // the server polls for its receive: its poll reads the SEND
      Completion c[4];
      if (server_.connection->recv_cq().poll(c) == 0) {
        ASSERT_LT(Clock::now(), deadline) << "the SEND did not arrive";
        continue;
      }
      ASSERT_EQ(c[0].id, recv_id);
      ASSERT_EQ(c[0].status, Status::Success);
      break;
    }
    // The receive completed with its ACK still waiting (no frame sent for it).
    if (counter(server_.connection->stats(), "ack_frames") == frames_before) ++deferred;
    server_.connection->close();
    auto completion = client_.connection->wait(send_id, 10s);
    ASSERT_TRUE(completion.has_value()) << completion.error().message();
    EXPECT_EQ(completion->status, Status::Success) << "attempt " << attempt;
  }
  // The case is about deferred ACKs: at least one must have been (a slow run may ACK some at once).
  EXPECT_GT(deferred, 0);
}

}  // namespace
}  // namespace rdmakit
