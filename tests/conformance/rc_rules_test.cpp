// The RC rules that every transport must apply alike (src/core/rc_state.hpp): the first failure is the
// connection's, with its Errc and Status; posts behind a failure are accepted and flushed; a completion
// queue holds its depth and reports an overflow; wait() refuses ids it can never see complete; the post
// prologue checks the request first, and a full queue is ResourceExhausted everywhere.
#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "conformance/fixture.hpp"

namespace rdmakit::conformance {
namespace {

class RcRules : public Conformance {
 protected:
  void SetUp() override {
    connect_pair(client_, server_);
    ASSERT_TRUE(client_.connection);
    source_ = region(*client_.context, 4096, Access::LocalWrite);
    target_ = region(*server_.context, 4096, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
    ASSERT_TRUE(source_ && target_);
  }

  // A second client, whose send and receive queues hold `depth` requests, connected to the server's
  // context; `server` holds the server's end (the connection lives while both ends do).
  void connect_with_depth(std::uint32_t depth, Endpoint& client, Endpoint& server) {
    server = Endpoint{.context = server_.context, .connection = nullptr};
    client.context = open_context(false, Options{.send_queue_depth = depth, .recv_queue_depth = depth});
    if (client.context) connect_pair(client, server);
  }

  // Breaks the client's connection with a WRITE to an unknown key; returns that WRITE's completion.
  Completion break_with_bad_key() {
    RemoteAddress bad = target_->descriptor().at(0);
    bad.rkey ^= 0x5a5a5a;
    auto id = client_.connection->write(source_->slice(0, 64), bad);
    EXPECT_TRUE(id.has_value());
    return id ? wait(*client_.connection, *id) : Completion{};
  }

  // Waits (bounded) until the connection reports a failure, e.g. after the peer closed.
  bool wait_until_failed(Connection& connection) {
    auto deadline = std::chrono::steady_clock::now() + kWait;
    while (connection.health().has_value()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  // A receive posted to the failed client connection: Flushed where the transport says it flushes such a
  // receive (Capabilities::flushes_receives_posted_in_error), else it stays pending (no completion).
  void expect_receive_in_error(std::uint64_t id) {
    if (client_.context->capabilities().flushes_receives_posted_in_error) {
      EXPECT_EQ(wait(*client_.connection, id).status, Status::Flushed);
      return;
    }
    auto waited = client_.connection->wait(id, 200ms);
    ASSERT_FALSE(waited.has_value()) << "completed with " << to_string(waited->status)
                                     << ", although the transport says it leaves it pending";
    EXPECT_EQ(waited.error().code(), Errc::Timeout) << waited.error().describe();
  }

  std::shared_ptr<MemoryRegion> source_, target_;
};

// The post prologue is one for every transport (RcState::check_post): the request is checked before
// anything else, so a malformed request is InvalidArgument even on a connection closed by this side; a
// well-formed one is refused there with ConnectionBroken.
TEST_P(RcRules, AMalformedPostOnAClosedConnectionIsInvalidArgument) {
  client_.connection->close();
  WorkRequest receive_opcode{.opcode = Opcode::Recv};
  Segment local = source_->slice(0, 8);
  std::array<Segment, 2> two{local, local};
  WorkRequest atomic_with_two{
      .opcode = Opcode::FetchAdd, .local = two, .remote = target_->descriptor().at(0), .compare_add = 1};
  for (auto [chain, what] :
       {std::pair{std::span<const WorkRequest>(), "an empty chain"},
        {std::span(&receive_opcode, 1), "a receive opcode"},
        {std::span<const WorkRequest>(&atomic_with_two, 1), "an atomic with two segments"}}) {
    auto posted = client_.connection->post(chain);
    ASSERT_FALSE(posted.has_value()) << what;
    EXPECT_EQ(posted.error().code(), Errc::InvalidArgument) << what << ": " << posted.error().describe();
  }
  const std::uint32_t max_sge = client_.context->capabilities().max_sge;
  std::vector<Segment> too_many(max_sge + 1, source_->slice(0, 8));
  auto received = client_.connection->post_recv(too_many);
  ASSERT_FALSE(received.has_value()) << max_sge + 1 << " segments for post_recv";
  EXPECT_EQ(received.error().code(), Errc::InvalidArgument) << received.error().describe();
  // Well formed: refused because the connection is closed.
  auto write = client_.connection->write(local, target_->descriptor().at(0));
  ASSERT_FALSE(write.has_value());
  EXPECT_EQ(write.error().code(), Errc::ConnectionBroken) << write.error().describe();
  auto recv = client_.connection->post_recv(local);
  ASSERT_FALSE(recv.has_value());
  EXPECT_EQ(recv.error().code(), Errc::ConnectionBroken) << recv.error().describe();
}

// A full queue refuses the post with ResourceExhausted, in one wording, on every transport. The device may
// grant more than the depth asked for (rxe rounds it up), so posts go on until refused, within a bound.
TEST_P(RcRules, AFullQueueRefusesThePostWithResourceExhausted) {
  constexpr std::uint32_t kDepth = 8;
  Endpoint client, server;
  connect_with_depth(kDepth, client, server);
  ASSERT_TRUE(client.connection);
  auto buffer = region(*client.context, 4096, Access::LocalWrite);
  ASSERT_TRUE(buffer);
  const auto expect_full = [&](const char* what, std::uint32_t accepted, std::optional<Error> refused) {
    ASSERT_TRUE(refused.has_value()) << what << ": " << accepted << " posts accepted in a queue of "
                                     << kDepth;
    EXPECT_GE(accepted, kDepth - 1) << what << ": refused early: " << refused->describe();
    EXPECT_EQ(refused->code(), Errc::ResourceExhausted) << what << ": " << refused->describe();
    EXPECT_NE(refused->message().find("queue full"), std::string::npos) << refused->message();
  };
  // Receives: nothing is sent to them, so they stay posted.
  std::uint32_t accepted = 0;
  std::optional<Error> refused;
  for (; accepted < 16 * kDepth && !refused; ++accepted)
    if (auto id = client.connection->post_recv(buffer->slice(0, 64)); !id) refused = id.error();
  expect_full("post_recv", accepted - 1, refused);
  // Sends: a SEND the peer has no receive for waits (receiver not ready) and holds the WRITEs behind it.
  refused.reset();
  accepted = 0;
  ASSERT_TRUE(client.connection->send(buffer->slice(0, 8)).has_value());
  for (; accepted < 16 * kDepth && !refused; ++accepted)
    if (auto id = client.connection->write(buffer->slice(0, 8), target_->descriptor().at(0)); !id)
      refused = id.error();
  expect_full("post", accepted, refused);
  EXPECT_TRUE(client.connection->health().has_value()) << "a full queue failed the connection";
}

TEST_P(RcRules, HealthReturnsTheFirstFailureWithItsErrcAndStatus) {
  Completion failed = break_with_bad_key();
  ASSERT_EQ(failed.status, Status::RemoteAccess);
  auto health = client_.connection->health();
  ASSERT_FALSE(health.has_value());
  EXPECT_EQ(health.error().code(), Errc::TransportFailure) << health.error().describe();
  EXPECT_EQ(health.error().status(), Status::RemoteAccess) << health.error().describe();
  // Later events do not replace it: not the peer closing, not this side's flushed posts.
  server_.connection->close();
  auto flushed =
      RDMAKIT_ASSERT_OK(client_.connection->write(source_->slice(0, 8), target_->descriptor().at(0)));
  EXPECT_EQ(wait(*client_.connection, flushed).status, Status::Flushed);
  std::this_thread::sleep_for(50ms);
  auto later = client_.connection->health();
  ASSERT_FALSE(later.has_value());
  EXPECT_EQ(later.error().code(), Errc::TransportFailure) << later.error().describe();
  EXPECT_EQ(later.error().status(), Status::RemoteAccess) << later.error().describe();
  auto stats = client_.connection->stats();
  EXPECT_TRUE(stats.failed);
  EXPECT_NE(stats.failure.find(std::string(to_string(Status::RemoteAccess))), std::string::npos)
      << stats.failure;
}

TEST_P(RcRules, PostsBehindAFailureAreAcceptedAndFlushed) {
  ASSERT_EQ(break_with_bad_key().status, Status::RemoteAccess);
  Segment local = source_->slice(0, 8);
  // Unsignaled too: a flushed operation always completes.
  std::array<WorkRequest, 3> chain{
      WorkRequest{
          .opcode = Opcode::Write, .local = std::span(&local, 1), .remote = target_->descriptor().at(0)},
      WorkRequest{.opcode = Opcode::Write,
                  .local = std::span(&local, 1),
                  .remote = target_->descriptor().at(8),
                  .signaled = false},
      WorkRequest{
          .opcode = Opcode::Read, .local = std::span(&local, 1), .remote = target_->descriptor().at(16)}};
  auto first = RDMAKIT_ASSERT_OK(client_.connection->post(chain));
  for (std::uint64_t i = 0; i < chain.size(); ++i) {
    Completion done = wait(*client_.connection, first + i);
    EXPECT_EQ(done.status, Status::Flushed) << "request " << i << ": " << to_string(done.status);
    EXPECT_EQ(done.opcode, chain[i].opcode);
  }
  auto inbox = region(*client_.context, 64, Access::LocalWrite);
  auto recv = RDMAKIT_ASSERT_OK(client_.connection->post_recv(inbox->slice(0, 64)));
  expect_receive_in_error(recv);
  // A malformed request is still refused at post, failure or not.
  WorkRequest receive_opcode{.opcode = Opcode::Recv};
  auto refused = client_.connection->post(std::span(&receive_opcode, 1));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
}

TEST_P(RcRules, PostRecvAfterThePeerClosedIsAcceptedAndFlushed) {
  auto inbox = region(*client_.context, 64, Access::LocalWrite);
  ASSERT_TRUE(inbox);
  auto before = RDMAKIT_ASSERT_OK(client_.connection->post_recv(inbox->slice(0, 32)));
  server_.connection->close();
  ASSERT_TRUE(wait_until_failed(*client_.connection)) << "the peer's close was never noticed";
  EXPECT_EQ(wait(*client_.connection, before).status, Status::Flushed);
  auto after = client_.connection->post_recv(inbox->slice(32, 32));
  ASSERT_TRUE(after.has_value()) << "refused: " << after.error().describe();
  expect_receive_in_error(*after);
  auto write =
      RDMAKIT_ASSERT_OK(client_.connection->write(source_->slice(0, 8), target_->descriptor().at(0)));
  EXPECT_EQ(wait(*client_.connection, write).status, Status::Flushed);
}

TEST_P(RcRules, ACompletionQueueHoldsItsDepthAndReportsAnOverflow) {
  // A queue of 2 entries shared by a connection's sends; 10 signaled WRITEs complete before anyone polls.
  auto tiny = RDMAKIT_ASSERT_OK(client_.context->create_cq(2));
  Endpoint client, server{.context = server_.context, .connection = nullptr};
  client.context = client_.context;
  connect_pair(client, server, ConnectOptions{.send_cq = tiny});
  ASSERT_TRUE(client.connection);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 10; ++i)
    ids.push_back(RDMAKIT_ASSERT_OK(
        client.connection->write(source_->slice(8 * i, 8), target_->descriptor().at(8 * i))));
  // Let every WRITE complete before anyone polls: the software transports count completions as they make
  // them; verbs counts them when polled, so there the pause stands in. Then drain: what the queue held
  // comes out, then its error.
  auto settle = std::chrono::steady_clock::now() + 2s;
  while (client.connection->stats().completed < ids.size() && std::chrono::steady_clock::now() < settle)
    std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(100ms);
  auto deadline = std::chrono::steady_clock::now() + kWait;
  std::size_t taken = 0;
  std::optional<Error> overflow;
  std::array<Completion, 16> batch;
  while (!overflow && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    auto got = tiny->wait(batch, 100ms);
    if (got)
      taken += *got;
    else
      overflow = got.error();
  }
  ASSERT_TRUE(overflow.has_value()) << "10 completions fit a queue of 2 (" << taken << " polled)";
  EXPECT_EQ(overflow->code(), Errc::ResourceExhausted) << overflow->describe();
  EXPECT_NE(overflow->message().find("overflow"), std::string::npos) << overflow->message();
  EXPECT_LT(taken, ids.size()) << "every completion arrived although the queue overflowed";
  EXPECT_FALSE(tiny->health().has_value());
  // wait() on an operation whose completion may be lost reports the error instead of a full timeout.
  auto waited = client.connection->wait(ids.back(), kWait);
  ASSERT_FALSE(waited.has_value());
  EXPECT_EQ(waited.error().code(), Errc::ResourceExhausted) << waited.error().describe();
}

TEST_P(RcRules, WaitOnAnIdThatCannotCompleteFailsAtOnce) {
  auto id = RDMAKIT_ASSERT_OK(client_.connection->write(source_->slice(0, 8), target_->descriptor().at(0)));
  ASSERT_EQ(wait(*client_.connection, id).status, Status::Success);
  auto start = std::chrono::steady_clock::now();
  auto expect_refused = [&](std::uint64_t bad, const char* what) {
    auto waited = client_.connection->wait(bad, kWait);
    ASSERT_FALSE(waited.has_value()) << what;
    EXPECT_EQ(waited.error().code(), Errc::InvalidArgument) << what << ": " << waited.error().describe();
  };
  expect_refused(id, "an id whose completion was already taken");
  expect_refused(id + 1000, "an id never issued");
  expect_refused(id | Connection::kRecvBit, "a receive id never issued");
  // An id of another connection.
  std::uint64_t foreign =
      (std::uint64_t{client_.connection->number() + 1} << 40) | (id & (Connection::kRecvBit - 1));
  expect_refused(foreign, "an id of another connection");
  // A completion taken by poll() is gone too.
  auto polled =
      RDMAKIT_ASSERT_OK(client_.connection->write(source_->slice(0, 8), target_->descriptor().at(0)));
  std::array<Completion, 4> batch;
  std::size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (got == 0 && std::chrono::steady_clock::now() < deadline)
    got = client_.connection->send_cq().poll(batch);
  ASSERT_EQ(got, 1u);
  EXPECT_EQ(batch[0].id, polled);
  expect_refused(polled, "an id taken by poll()");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "a refused wait waited";
}

// However long ago it was taken: ids with many times a queue's depth of operations posted after them (more
// than any bounded memory of taken ids would hold) are refused at once, whether wait() or poll() took the
// completion, and so is an unsignaled success (it has no completion to take).
TEST_P(RcRules, WaitOnAnIdTakenLongAgoFailsAtOnce) {
  constexpr std::uint32_t kDepth = 16;
  Endpoint client, server;
  connect_with_depth(kDepth, client, server);
  ASSERT_TRUE(client.connection);
  auto source = region(*client.context, 64, Access::LocalWrite);
  ASSERT_TRUE(source);
  Connection& connection = *client.connection;
  auto write = [&](bool signaled) {
    return connection.write(source->slice(0, 8), target_->descriptor().at(0), signaled);
  };
  const std::uint64_t by_wait = RDMAKIT_ASSERT_OK(write(true));
  ASSERT_EQ(wait(connection, by_wait).status, Status::Success);
  const std::uint64_t by_poll = RDMAKIT_ASSERT_OK(write(true));
  std::array<Completion, 4> batch;
  std::size_t got = 0;
  for (auto deadline = std::chrono::steady_clock::now() + kWait;
       got == 0 && std::chrono::steady_clock::now() < deadline;)
    got = connection.send_cq().poll(batch);
  ASSERT_EQ(got, 1u);
  ASSERT_EQ(batch[0].id, by_poll);
  const std::uint64_t unsignaled = RDMAKIT_ASSERT_OK(write(false));
  std::uint64_t last = 0;
  for (std::uint32_t i = 0; i < 8 * kDepth; ++i) {
    last = RDMAKIT_ASSERT_OK(write(true));
    ASSERT_EQ(wait(connection, last).status, Status::Success) << "write " << i;
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto [id, what] : {std::pair{by_wait, "taken by wait() long ago"},
                          {by_poll, "taken by poll() long ago"},
                          {unsignaled, "an unsignaled success long ago"},
                          {last, "taken by wait() just now"}}) {
    auto waited = connection.wait(id, kWait);
    ASSERT_FALSE(waited.has_value()) << what;
    EXPECT_EQ(waited.error().code(), Errc::InvalidArgument) << what << ": " << waited.error().describe();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWait / 3) << "a refused wait waited";
}

// close() hands what was still pending to the queue; taking it there after the close counts as taken too.
TEST_P(RcRules, ACompletionPolledAfterCloseIsTaken) {
  auto id = RDMAKIT_ASSERT_OK(client_.connection->write(source_->slice(0, 8), target_->descriptor().at(0)));
  std::this_thread::sleep_for(50ms);  // usually done by now; close() flushes it if not
  client_.connection->close();
  std::array<Completion, 4> batch;
  std::optional<Completion> polled;
  for (auto deadline = std::chrono::steady_clock::now() + kWait;
       !polled && std::chrono::steady_clock::now() < deadline;) {
    const std::size_t got = client_.connection->send_cq().poll(batch);
    for (std::size_t i = 0; i < got; ++i)
      if (batch[i].id == id) polled = batch[i];
  }
  ASSERT_TRUE(polled.has_value()) << "the WRITE's completion never came out of the queue after close()";
  const auto start = std::chrono::steady_clock::now();
  auto waited = client_.connection->wait(id, kWait);
  ASSERT_FALSE(waited.has_value()) << "a completion polled after close() was returned again";
  EXPECT_EQ(waited.error().code(), Errc::InvalidArgument) << waited.error().describe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWait / 3) << "a refused wait waited";
}

INSTANTIATE_TEST_SUITE_P(Transports, RcRules, ::testing::ValuesIn(conformance_transports()),
                         transport_param_name);

}  // namespace
}  // namespace rdmakit::conformance
