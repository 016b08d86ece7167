// rdmakit-perf's server against a hostile client (finding 7): a Begin larger than the Hello made the
// server memset past its buffers, and a Hello's sizes overflowed the layout arithmetic. A real server runs
// in-process over tcp; a hand-made client speaks the control protocol. Also the pure message checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "perf/control.hpp"
#include "perf/params.hpp"
#include "perf/run.hpp"
#include "perf/session.hpp"
#include "stranger.hpp"
#include "support/test_support.hpp"

namespace rdmakit::perf {
namespace {

using namespace std::chrono_literals;

ControlMessage hello_for(const MemoryRegion& region, std::uint64_t size, std::uint32_t connections) {
  ControlMessage hello;
  hello.kind = MessageKind::Hello;
  hello.test = static_cast<std::uint8_t>(perf::Test::WriteBw);
  hello.connections = connections;
  hello.tx_depth = 16;
  hello.size = size;
  auto bytes = region.descriptor().serialize();
  std::memcpy(hello.region, bytes.data(), bytes.size());
  return hello;
}

// A server thread and a hand-made client; the test sends what it likes and reads the replies.
class HostileClient : public ::testing::Test {
 protected:
  void SetUp() override {
    auto params = parse_args(std::vector<std::string_view>{"write_bw", "--transport=tcp"});
    ASSERT_TRUE(params.has_value());
    server_params_ = *params;
    server_context_ = open_context(server_params_).value();
    listener_ = server_context_->listen("127.0.0.1:0").value();
    server_ = std::thread([this] { served_ = run_server(server_params_, server_context_, *listener_); });
    client_context_ = Context::open({.transport = "tcp"}).value();
    control_connection_ = client_context_->connect(listener_->address()).value();
    ASSERT_TRUE(prove(*control_connection_));  // hostile, but of our own user: it knows the secret
    control_.emplace(ControlChannel::open(*client_context_, control_connection_).value());
    memory_ =
        client_context_->allocate(1 << 16, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead)
            .value();
  }
  void TearDown() override {
    control_.reset();
    data_.clear();
    control_connection_.reset();
    if (server_.joinable()) server_.join();
  }
  // Sends the Hello, makes its data connections and returns the server's Welcome.
  Result<ControlMessage> hello(const ControlMessage& hello) {
    if (auto ok = control_->send(hello); !ok) return std::unexpected(ok.error());
    // A refused Hello is answered at once, before any data connection is accepted.
    if (auto early = control_->receive(500ms); early || early.error().code() != Errc::Timeout) return early;
    for (std::uint32_t i = 0; i < hello.connections && i < 4; ++i) {
      auto c = client_context_->connect(listener_->address());
      if (!c) return std::unexpected(c.error());
      if (auto proven = prove(**c); !proven) return std::unexpected(proven.error());
      data_.push_back(*c);
    }
    return control_->receive(10s);
  }
  Result<void> server_result() {
    server_.join();
    return served_;
  }

  Result<void> prove(Connection& connection) {
    auto proof = proof_config(listener_->address(), client_context_->capabilities());
    if (!proof) return std::unexpected(proof.error());
    auto proven = bootstrap::prove_initiate(*client_context_, connection, *proof, "hostile client");
    if (!proven) return std::unexpected(proven.error());
    return {};
  }

  Params server_params_;
  std::shared_ptr<Context> server_context_, client_context_;
  std::shared_ptr<Listener> listener_;
  std::thread server_;
  Result<void> served_;
  std::shared_ptr<Connection> control_connection_;
  std::optional<ControlChannel> control_;
  std::vector<std::shared_ptr<Connection>> data_;
  std::shared_ptr<MemoryRegion> memory_;
};

TEST_F(HostileClient, BeginLargerThanHelloIsRefusedNotWritten) {
  auto welcome = hello(hello_for(*memory_, 4096, 1));
  ASSERT_TRUE(welcome.has_value()) << welcome.error().describe();
  ASSERT_EQ(welcome->kind, MessageKind::Welcome);
  ASSERT_TRUE(welcome->ok) << welcome->get_text();
  ControlMessage begin;
  begin.kind = MessageKind::Begin;
  begin.size = std::uint64_t{1} << 24;  // 16 MiB into a 4 KiB slot
  begin.count = 10;
  ASSERT_TRUE(control_->send(begin).has_value());
  auto reply = control_->receive(10s);
  ASSERT_TRUE(reply.has_value()) << reply.error().describe();
  EXPECT_EQ(reply->kind, MessageKind::Verdict)
      << "the server prepared buffers for a size its Hello did not size";
  EXPECT_FALSE(reply->ok);
  EXPECT_NE(reply->get_text().find("larger than the Hello"), std::string::npos) << reply->get_text();
  auto served = server_result();
  ASSERT_FALSE(served.has_value());
  EXPECT_EQ(served.error().code(), Errc::ProtocolError);
}

TEST_F(HostileClient, HelloWhoseLayoutOverflowsIsRefused) {
  // round_page(2^64 - 100) wrapped to 0 and slot_bytes * connections could wrap too.
  auto welcome = hello(hello_for(*memory_, std::numeric_limits<std::uint64_t>::max() - 100, 3));
  ASSERT_TRUE(welcome.has_value()) << welcome.error().describe();
  EXPECT_EQ(welcome->kind, MessageKind::Welcome);
  EXPECT_FALSE(welcome->ok);
  EXPECT_NE(welcome->get_text().find("over 2 GiB"), std::string::npos) << welcome->get_text();
  EXPECT_FALSE(server_result().has_value());
}

// A working set beyond the buffers the Hello sized would make the server zero and check memory past them.
TEST_F(HostileClient, HelloWhoseWorkingSetExceedsItsBuffersIsRefused) {
  ControlMessage message = hello_for(*memory_, 4096, 1);
  message.ops = std::uint64_t{1} << 30;  // the working set
  auto welcome = hello(message);
  ASSERT_TRUE(welcome.has_value()) << welcome.error().describe();
  EXPECT_EQ(welcome->kind, MessageKind::Welcome);
  EXPECT_FALSE(welcome->ok);
  EXPECT_NE(welcome->get_text().find("working set"), std::string::npos) << welcome->get_text();
  EXPECT_FALSE(server_result().has_value());
}

// A client must prove the secret (the job secret, or without one the per-user secret) before the server
// reads a control message: one that does not gets a nonce and a closed connection, and the server goes on
// waiting for a client that can.
std::vector<std::string_view> kClientArgs = {"write_bw", "x", "-s", "4096", "-n", "50", "--transport=tcp"};

struct PerfServer {
  Params params = parse_args(std::vector<std::string_view>{"write_bw", "--transport=tcp"}).value();
  std::shared_ptr<Context> context = open_context(params).value();
  std::shared_ptr<Listener> listener = context->listen("127.0.0.1:0").value();
  Result<void> served;
  std::thread thread{[this] { served = run_server(params, context, *listener); }};

  Result<Report> run_honest_client() {
    auto client = parse_args(kClientArgs).value();
    client.server = listener->address();
    auto client_context = open_context(client);
    if (!client_context) return std::unexpected(client_context.error());
    return run_client(client, *client_context);
  }
  ~PerfServer() {
    if (thread.joinable()) thread.join();
  }
};

TEST(PerfAuth, AClientWithoutTheSecretGetsOnlyANonceAndTheServerWaitsOn) {
  rdmakit::testing::expect_warning("refused a client");
  PerfServer server;
  auto context = Context::open({.transport = "tcp"}).value();
  auto connection = context->connect(server.listener->address()).value();
  constexpr std::size_t kRoom = 4096;
  auto memory = context->allocate(3 * kRoom, Access::LocalWrite).value();
  auto* bytes = static_cast<unsigned char*>(memory->data());
  auto first = connection->post_recv(memory->slice(0, kRoom)).value();
  auto second = connection->post_recv(memory->slice(kRoom, kRoom)).value();
  auto challenge = connection->wait(first, 10s);
  ASSERT_TRUE(challenge && challenge->ok());
  EXPECT_EQ(challenge->bytes, 8u + 32u);  // a frame header and a nonce
  EXPECT_EQ(std::memcmp(bytes, "RKPP", 4), 0);
  for (std::size_t i = 40; i < kRoom; ++i) ASSERT_EQ(bytes[i], 0) << "the server said more than a nonce";
  // The old protocol: a Hello at once.
  ControlMessage hello = hello_for(*memory, 4096, 1);
  auto frame = encode_message(hello);
  std::memcpy(bytes + 2 * kRoom, frame.data(), frame.size());
  if (auto id = connection->send(memory->slice(2 * kRoom, static_cast<std::uint32_t>(frame.size()))); id)
    (void)connection->wait(*id, 2s);
  auto answer = connection->wait(second, 2s);
  EXPECT_FALSE(answer && answer->ok()) << "the server answered a client that proved nothing";
  for (std::size_t i = kRoom; i < 2 * kRoom; ++i) ASSERT_EQ(bytes[i], 0) << "the server sent a Welcome";
  auto report = server.run_honest_client();
  EXPECT_TRUE(report) << report.error().describe();
  server.thread.join();
  EXPECT_TRUE(server.served) << server.served.error().describe();
}

// Run as uid 65534 (stranger.hpp): an rdmakit-perf client of the server at $RDMAKIT_TEST_ADDRESS.
int perf_client_as_stranger() {
  auto client = parse_args(kClientArgs).value();
  client.server = std::getenv("RDMAKIT_TEST_ADDRESS");
  auto context = open_context(client);
  if (!context) return std::printf("ERROR %s\n", context.error().describe().c_str()), 1;
  auto report = run_client(client, *context);
  std::printf("%s\n", report ? "SERVED" : ("REFUSED " + report.error().describe()).c_str());
  return 0;
}

const int kParts = rdmakit::testing::stranger::parts({{"perf-client", perf_client_as_stranger}});

TEST(PerfAuth, WithoutAJobSecretAnotherUidIsNotServed) {
  if (auto why = rdmakit::testing::stranger::unavailable(); !why.empty()) GTEST_SKIP() << why;
  rdmakit::testing::expect_warning("refused a client");
  unsetenv("RDMAKIT_JOB_SECRET");
  PerfServer server;
  auto outcome =
      rdmakit::testing::stranger::run("perf-client", {{"RDMAKIT_TEST_ADDRESS", server.listener->address()}});
  EXPECT_EQ(outcome.status, 0) << outcome.output;
  EXPECT_TRUE(outcome.output.starts_with("REFUSED")) << "uid 65534: " << outcome.output;
  auto report = server.run_honest_client();
  EXPECT_TRUE(report) << report.error().describe();
  server.thread.join();
  EXPECT_TRUE(server.served) << server.served.error().describe();
}

TEST(PerfControl, LayoutIsCheckedArithmetic) {
  auto layout = plan_layout(3, 5000, true);
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->send_offset, 8192u);
  EXPECT_EQ(layout->slot_bytes, 16384u);
  EXPECT_EQ(layout->total, 3u * 16384u);
  EXPECT_TRUE(plan_layout(kMaxConnections, kMaxMessageSize, true).has_value());
  EXPECT_FALSE(plan_layout(0, 4096, false).has_value());
  EXPECT_FALSE(plan_layout(kMaxConnections + 1, 4096, false).has_value());
  EXPECT_FALSE(plan_layout(1, kMaxMessageSize + 1, false).has_value());
  EXPECT_FALSE(plan_layout(1, std::numeric_limits<std::uint64_t>::max(), false).has_value());
}

TEST(PerfControl, MessagesAreCheckedFieldByField) {
  ControlMessage hello;
  hello.test = static_cast<std::uint8_t>(perf::Test::WriteLat);
  hello.connections = 1;
  hello.tx_depth = 1;
  hello.size = 4096;
  EXPECT_TRUE(check_hello(hello).has_value());
  auto bad = hello;
  bad.test = 7;
  EXPECT_FALSE(check_hello(bad).has_value());
  bad = hello, bad.tx_depth = 0;
  EXPECT_FALSE(check_hello(bad).has_value());
  bad = hello, bad.connections = 2;  // latency tests run over one connection
  EXPECT_FALSE(check_hello(bad).has_value());
  bad = hello, bad.bidirectional = 1;
  EXPECT_FALSE(check_hello(bad).has_value());

  ControlMessage begin;
  begin.size = 4096;
  EXPECT_TRUE(check_begin(begin, hello).has_value());
  begin.size = 4097;
  EXPECT_FALSE(check_begin(begin, hello).has_value());
  begin.size = 0;  // write_lat reads the last byte
  EXPECT_FALSE(check_begin(begin, hello).has_value());
  begin.size = 64;
  for (double seconds : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e300}) {
    begin.seconds = seconds;
    EXPECT_FALSE(check_begin(begin, hello).has_value()) << seconds;
  }

  ControlMessage message;
  message.kind = MessageKind::End, message.size = 4096;
  auto bytes = encode_message(message);
  auto decoded = decode_message(bytes);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().describe();
  EXPECT_EQ(decoded->kind, MessageKind::End);
  EXPECT_EQ(decoded->size, 4096u);
  EXPECT_FALSE(decode_message(std::span(bytes).first(bytes.size() - 1)).has_value());
  message.kind = static_cast<MessageKind>(9);
  EXPECT_TRUE(encode_message(message).empty()) << "an unknown kind was encoded";
  auto frame = bytes;
  frame[5] = std::byte{9};  // the frame's type: an unknown kind
  EXPECT_FALSE(decode_message(frame).has_value());
  message.kind = MessageKind::End, message.ok = 2;
  EXPECT_FALSE(decode_message(encode_message(message)).has_value());
  frame = bytes, frame[0] = std::byte{0};  // magic
  EXPECT_FALSE(decode_message(frame).has_value());
  frame = bytes, frame[4] = std::byte{1};  // the version before the one message channel
  auto old = decode_message(frame);
  ASSERT_FALSE(old.has_value());
  EXPECT_EQ(old.error().code(), Errc::NotSupported) << old.error().describe();
}

}  // namespace
}  // namespace rdmakit::perf
