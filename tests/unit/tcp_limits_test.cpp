// What one peer can cost a tcp target and its other peers: a stalled frame or unread responses must not
// block deregistration beyond timeout_ms, unread responses must not pile up without bound, silent peers must
// not hold accept(), a flood on one connection must not starve another, and a wrapped connection counter
// must not overwrite a live connection. Hostile peers are raw sockets speaking the wire format (wire.hpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/wire.hpp"

namespace rdmakit::tcp {
namespace {

// tcp's own counter `name` (a named transport counter of ConnectionStats); a missing one fails the test.
std::uint64_t counter(const ConnectionStats& stats, const char* name) {
  auto value = stats.counter(name);
  EXPECT_TRUE(value.has_value()) << "tcp keeps no counter " << name;
  return value.value_or(0);
}

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// A raw socket connected to `address` ("host:port"); `rcvbuf` > 0 shrinks its receive buffer first.
int dial(const std::string& address, int rcvbuf = 0) {
  auto colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  return fd;
}

Hello hello_named(std::string_view name) {
  Hello hello{};
  hello.magic = kHelloMagic;
  hello.version = kWireVersion;
  hello.name_length = static_cast<std::uint16_t>(name.size());
  hello.id = 42;
  hello.epoch = 43;
  std::memcpy(hello.name, name.data(), name.size());
  return hello;
}

FrameHeader request(FrameType type, std::uint64_t addr, std::uint32_t length, std::uint32_t rkey,
                    std::uint64_t sequence = 1) {
  return FrameHeader{.type = type,
                     .status = 0,
                     .flags = 0,
                     .length = length,
                     .addr = addr,
                     .rkey = rkey,
                     .imm = 0,
                     .operand1 = 0,
                     .operand2 = 0,
                     .sequence = sequence};
}

// True when `fd` has bytes to read (or was closed) within `limit`.
bool readable_within(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(limit.count())) > 0;
}

class Limits : public ::testing::Test {
 protected:
  void open_victim(Options options) {
    options.transport = "tcp";
    options.name = "victim";
    victim_ = Context::open(options).value();
    listener_ = victim_->listen().value();
  }

  // A raw peer that completed the handshake, and the victim's side of its connection.
  int connect_raw(std::string_view name = "raw", int rcvbuf = 0) {
    std::shared_ptr<Connection> served;
    std::thread acceptor([&] { served = listener_->accept(5s).value_or(nullptr); });
    int fd = dial(listener_->address(), rcvbuf);
    Hello hello = hello_named(name);
    EXPECT_EQ(::send(fd, &hello, sizeof(hello), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(hello)));
    Hello theirs{};
    EXPECT_EQ(::recv(fd, &theirs, sizeof(theirs), MSG_WAITALL), static_cast<ssize_t>(sizeof(theirs)));
    acceptor.join();
    EXPECT_NE(served, nullptr);
    accepted_.push_back(std::move(served));
    return fd;
  }

  // Destroys `region` (deregistration) and returns how long it took; gives up after `limit` (then undoes
  // the stall from our side so that the test ends).
  std::int64_t deregistration_ms(std::shared_ptr<MemoryRegion>& region, int stalled_fd,
                                 std::chrono::milliseconds limit) {
    auto start = Clock::now();
    auto done = std::async(std::launch::async, [&] { region.reset(); });
    if (done.wait_for(limit) != std::future_status::ready) {
      ::close(stalled_fd);
      accepted_.clear();
      done.wait();
      return std::numeric_limits<std::int64_t>::max();
    }
    return ms_since(start);
  }

  std::shared_ptr<Context> victim_;
  std::shared_ptr<Listener> listener_;
  std::vector<std::shared_ptr<Connection>> accepted_;
};

// Finding 4: a WRITE whose payload stops half way pins the region; the connection must fail after
// timeout_ms without progress and let go of it, even though the application keeps the connection object.
TEST_F(Limits, StalledWritePayloadDoesNotBlockDeregistration) {
  open_victim({.timeout = 500ms});
  auto region = victim_->allocate(1 << 16, Access::LocalWrite | Access::RemoteWrite).value();
  int fd = connect_raw();
  auto header =
      request(FrameType::Write, reinterpret_cast<std::uint64_t>(region->data()), 1 << 16, region->rkey());
  ::send(fd, &header, sizeof(header), MSG_NOSIGNAL);
  std::vector<char> part(1000, 'x');
  ::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(100ms);  // the target is now inside the payload, region pinned
  EXPECT_LT(deregistration_ms(region, fd, 3s), 500 + 1000);
  ASSERT_FALSE(accepted_.empty());
  if (accepted_[0]) {
    EXPECT_FALSE(accepted_[0]->health().has_value());
  }
  ::close(fd);
}

// Finding 4: READ responses that the peer never reads pin their source region while queued.
TEST_F(Limits, UnreadReadResponsesDoNotBlockDeregistration) {
  open_victim({.timeout = 500ms});
  constexpr std::uint32_t kSize = 1 << 20;
  auto region = victim_->allocate(kSize, Access::LocalWrite | Access::RemoteRead).value();
  int fd = connect_raw("reader", 4096);
  for (std::uint64_t sequence = 1; sequence <= 8; ++sequence) {
    auto header = request(FrameType::Read, reinterpret_cast<std::uint64_t>(region->data()), kSize,
                          region->rkey(), sequence);
    ::send(fd, &header, sizeof(header), MSG_NOSIGNAL);
  }
  std::this_thread::sleep_for(100ms);  // responses queued behind a full socket, region pinned
  EXPECT_LT(deregistration_ms(region, fd, 3s), 500 + 1000);
  ::close(fd);
}

// Finding 5: a peer that sends READs and never reads the responses must stop being read once its queued
// responses reach the responder depth (send_queue_depth), instead of growing the target without bound.
TEST_F(Limits, UnreadResponsesStopTheResponderReading) {
  constexpr std::uint32_t kDepth = 64;
  open_victim({.timeout = 10s, .send_queue_depth = kDepth});
  auto region = victim_->allocate(4096, Access::LocalWrite | Access::RemoteRead).value();
  int fd = connect_raw("reader", 4096);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::vector<FrameHeader> burst(1024);
  std::uint64_t sequence = 1;
  std::size_t sent = 0, partial = 0;  // partial: bytes of the burst still to send
  auto start = Clock::now();
  while (ms_since(start) < 1500) {
    if (partial == 0) {
      for (auto& header : burst)
        header = request(FrameType::Read, reinterpret_cast<std::uint64_t>(region->data()), 8, region->rkey(),
                         sequence++);
      partial = burst.size() * sizeof(FrameHeader);
    }
    const char* from =
        reinterpret_cast<const char*>(burst.data()) + burst.size() * sizeof(FrameHeader) - partial;
    ssize_t n = ::send(fd, from, partial, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      partial -= static_cast<std::size_t>(n);
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  ASSERT_NE(accepted_[0], nullptr);
  auto stats = accepted_[0]->stats();
  EXPECT_LE(counter(stats, "queued_responses"), kDepth + 1);
  EXPECT_GE(counter(stats, "responder_pauses"), 1u);
  EXPECT_FALSE(stats.failed) << stats.failure;
  // What the peer got into the target is what the socket buffers hold, not an unbounded stream.
  EXPECT_LT(sent, std::size_t{32} << 20);
  ::close(fd);
}

// Finding 6: peers that connect and say nothing (or one byte) must not keep an honest client out.
TEST_F(Limits, SilentPeersDoNotDelayAnHonestClient) {
  open_victim({.connect_timeout = 1000ms});
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) {
    silent.push_back(dial(listener_->address()));
    if (i % 2) ::send(silent.back(), "R", 1, MSG_NOSIGNAL);
  }
  std::atomic<bool> connected{false};
  std::int64_t connect_ms = -1;
  std::thread honest([&] {
    auto client = Context::open({.transport = "tcp", .name = "honest", .connect_timeout = 3000ms}).value();
    auto start = Clock::now();
    auto connection = client->connect(listener_->address());
    connect_ms = ms_since(start);
    EXPECT_TRUE(connection.has_value()) << connection.error().message();
    connected = true;
    while (connected) std::this_thread::sleep_for(1ms);  // keep it open until accepted
  });
  std::shared_ptr<Connection> accepted;
  auto start = Clock::now();
  while (!accepted && ms_since(start) < 4000) {
    auto next = listener_->accept(200ms);
    if (next && (*next)->peer().name == "honest") accepted = *next;
  }
  while (!connected) std::this_thread::sleep_for(1ms);
  connected = false;
  honest.join();
  EXPECT_NE(accepted, nullptr);
  EXPECT_GE(connect_ms, 0);
  EXPECT_LT(connect_ms, 1000);
  for (int fd : silent) ::close(fd);
}

// Finding 6: the listener tells nothing about itself (its hello: name, id, epoch) before it has a valid
// hello, and drops a peer that does not send one within handshake_timeout_ms.
TEST_F(Limits, NothingAboutUsBeforeAValidHello) {
  open_victim(Options{}.set("handshake_timeout_ms", "300"));
  std::thread acceptor([&] { (void)listener_->accept(1500ms); });
  int silent = dial(listener_->address());
  int half = dial(listener_->address());
  Hello hello = hello_named("half");
  ::send(half, &hello, 100, MSG_NOSIGNAL);
  int bad = dial(listener_->address());
  char http[256] = "GET / HTTP/1.0\r\n\r\n";
  ::send(bad, http, sizeof(http), MSG_NOSIGNAL);
  for (int fd : {silent, half, bad}) {
    auto start = Clock::now();
    // Readable only because the victim closed it, with no byte of a hello before.
    while (ms_since(start) < 3000 && !readable_within(fd, 100ms)) {
    }
    char byte;
    EXPECT_EQ(::recv(fd, &byte, 1, MSG_DONTWAIT), 0) << "the victim sent something, or kept the socket open";
    ::close(fd);
  }
  acceptor.join();
}

// Finding 9: a flood of small requests on one connection must not starve another connection's operation:
// the target reads a bounded number of bytes from one socket before it looks at the others.
TEST_F(Limits, FloodingPeerDoesNotStarveAnother) {
  open_victim({});
  auto region = victim_->allocate(4096, Access::LocalWrite | Access::RemoteWrite).value();
  int flood = connect_raw("flood");
  fcntl(flood, F_SETFL, fcntl(flood, F_GETFL) | O_NONBLOCK);
  std::atomic<bool> stop{false};
  std::thread flooder([&] {
    // Zero-byte WRITEs: cheap to send in bulk, one read per 48 bytes at the target.
    std::vector<FrameHeader> burst(1365);
    std::uint64_t sequence = 1;
    std::vector<char> acks(1 << 16);
    std::size_t partial = 0;  // bytes of the last frame still to send
    while (!stop) {
      if (partial == 0) {
        for (auto& header : burst)
          header = request(FrameType::Write, reinterpret_cast<std::uint64_t>(region->data()), 0,
                           region->rkey(), sequence++);
        partial = burst.size() * sizeof(FrameHeader);
      }
      const char* from =
          reinterpret_cast<const char*>(burst.data()) + burst.size() * sizeof(FrameHeader) - partial;
      ssize_t n = ::send(flood, from, partial, MSG_NOSIGNAL);
      if (n > 0) partial -= static_cast<std::size_t>(n);
      while (::recv(flood, acks.data(), acks.size(), MSG_DONTWAIT) > 0) {
      }
    }
  });
  auto client = Context::open({.transport = "tcp", .name = "honest"}).value();
  std::shared_ptr<Connection> served;
  std::thread acceptor([&] { served = listener_->accept(5s).value_or(nullptr); });
  auto connection = client->connect(listener_->address()).value();
  acceptor.join();
  auto source = client->allocate(8, Access::LocalWrite).value();
  std::this_thread::sleep_for(200ms);  // the flood is under way
  std::int64_t worst = 0;
  int ops = 0;
  auto start = Clock::now();
  while (ms_since(start) < 1500) {
    auto op_start = Clock::now();
    auto id = connection->write(source->whole().value(), region->descriptor().at(0));
    ASSERT_TRUE(id.has_value());
    auto done = connection->wait(*id, 5s);
    ASSERT_TRUE(done.has_value()) << done.error().message();
    EXPECT_EQ(done->status, Status::Success);
    worst = std::max(worst, ms_since(op_start));
    ++ops;
  }
  stop = true;
  flooder.join();
  EXPECT_LT(worst, 300) << "an 8-byte WRITE waited behind another connection's flood (" << ops << " done)";
  ::close(flood);
}

// Finding 9: connection numbers wrap after 2^24; the next number must skip a live connection instead of
// taking its place in the engine (where the new one would then receive the old one's events).
TEST_F(Limits, ConnectionNumbersSkipLiveOnesAfterWrap) {
  open_victim({});
  auto server_region = victim_->allocate(4096, Access::LocalWrite | Access::RemoteWrite).value();
  // Block mode: only the client's engine reads its sockets, as in an application that waits in the kernel.
  auto client = Context::open({.transport = "tcp", .name = "client", .wait_mode = WaitMode::Block}).value();
  auto source = client->allocate(8, Access::LocalWrite).value();
  auto connect = [&] {
    std::shared_ptr<Connection> served;
    std::thread acceptor([&] { served = listener_->accept(5s).value_or(nullptr); });
    auto connection = client->connect(listener_->address()).value();
    acceptor.join();
    accepted_.push_back(served);
    return connection;
  };
  auto first = connect();
  auto tcp = std::dynamic_pointer_cast<TcpContext>(client);
  ASSERT_NE(tcp, nullptr);
  tcp->set_next_connection_number_for_testing((std::uint64_t{1} << 24) + first->stats().connection);
  auto second = connect();
  EXPECT_NE(second->stats().connection, first->stats().connection);
  second.reset();  // its engine entry goes away
  auto id = first->write(source->whole().value(), server_region->descriptor().at(0)).value();
  auto done = first->wait(id, 3s);
  ASSERT_TRUE(done.has_value()) << done.error().message();
  EXPECT_EQ(done->status, Status::Success);
}

// The max_sge option caps the scatter-gather entries tcp takes, as it caps a verbs QP's: reported by
// capabilities() and enforced at post and post_recv.
TEST_F(Limits, MaxSgeOptionIsHonoured) {
  open_victim({});
  auto client = Context::open({.transport = "tcp", .name = "client", .max_sge = 2}).value();
  EXPECT_EQ(client->capabilities().max_sge, 2u);
  std::shared_ptr<Connection> served;
  std::thread acceptor([&] { served = listener_->accept(5s).value_or(nullptr); });
  auto connection = client->connect(listener_->address()).value();
  acceptor.join();
  accepted_.push_back(served);
  auto target = victim_->allocate(64, Access::LocalWrite | Access::RemoteWrite).value();
  auto source = client->allocate(64, Access::LocalWrite).value();
  std::vector<Segment> two{source->slice(0, 8), source->slice(8, 8)};
  std::vector<Segment> three{source->slice(0, 8), source->slice(8, 8), source->slice(16, 8)};
  auto ok = connection->write(std::span<const Segment>(two), target->descriptor().at(0)).value();
  EXPECT_EQ(connection->wait(ok, 3s)->status, Status::Success);
  auto refused = connection->write(std::span<const Segment>(three), target->descriptor().at(0));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
  EXPECT_NE(refused.error().message().find("max_sge is 2"), std::string::npos) << refused.error().message();
  auto recv = connection->post_recv(std::span<const Segment>(three));
  ASSERT_FALSE(recv.has_value());
  EXPECT_EQ(recv.error().code(), Errc::InvalidArgument);
  EXPECT_TRUE(connection->health().has_value()) << "a refused post must not break the connection";
}

// Finding 9: a peer's name reaches log lines and error messages escaped (no line breaks, no terminal
// control sequences from the network).
TEST_F(Limits, PeerNamesAreEscapedInMessages) {
  open_victim({});
  int fd = connect_raw("evil\nrdmakit error [tcp] forged\x1b[2J");
  auto header = request(FrameType::Write, 0, 0, 0);
  header.type = static_cast<FrameType>(99);
  ::send(fd, &header, sizeof(header), MSG_NOSIGNAL);
  ASSERT_NE(accepted_[0], nullptr);
  auto start = Clock::now();
  while (accepted_[0]->health().has_value() && ms_since(start) < 3000) std::this_thread::sleep_for(5ms);
  auto health = accepted_[0]->health();
  ASSERT_FALSE(health.has_value());
  EXPECT_EQ(health.error().message().find('\n'), std::string::npos) << health.error().message();
  EXPECT_EQ(health.error().message().find('\x1b'), std::string::npos) << health.error().message();
  EXPECT_NE(health.error().message().find("evil\\x0a"), std::string::npos) << health.error().message();
  ::close(fd);
}

}  // namespace
}  // namespace rdmakit::tcp
