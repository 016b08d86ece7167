// rdmakit-perf's server against a hostile client (finding 7): a Begin larger than the Hello made the
// server memset past its buffers, and a Hello's sizes overflowed the layout arithmetic. A real server runs
// in-process over tcp; a hand-made client speaks the control protocol. Also the pure message checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "perf/control.hpp"
#include "perf/params.hpp"
#include "perf/run.hpp"
#include "perf/session.hpp"

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
      data_.push_back(*c);
    }
    return control_->receive(10s);
  }
  Result<void> server_result() {
    server_.join();
    return served_;
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
  auto bytes = std::as_bytes(std::span(&message, 1));
  EXPECT_TRUE(decode_message(bytes).has_value());
  EXPECT_FALSE(decode_message(bytes.first(bytes.size() - 1)).has_value());
  message.kind = static_cast<MessageKind>(9);
  EXPECT_FALSE(decode_message(bytes).has_value());
  message.kind = MessageKind::End, message.ok = 2;
  EXPECT_FALSE(decode_message(bytes).has_value());
  message.ok = 1, message.magic = 0;
  EXPECT_FALSE(decode_message(bytes).has_value());
}

}  // namespace
}  // namespace rdmakit::perf
