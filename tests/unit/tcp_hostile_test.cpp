// Hostile and malformed bytes at a tcp endpoint: an error and a closed connection, never a crash, a hang
// or a write out of bounds. A raw socket speaks the wire format (src/transport/tcp/wire.hpp) directly.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "transport/tcp/wire.hpp"

namespace rdmakit::tcp {
namespace {

using namespace std::chrono_literals;

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    context_ = Context::open({.transport = "tcp", .name = "victim"}).value();
    target_ = context_
                  ->allocate(4096, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead |
                                       Access::RemoteAtomic)
                  .value();
    listener_ = context_->listen().value();
  }

  // Connects a raw socket and completes the handshake; the victim's side is accepted in the background.
  int connect_raw() {
    auto colon = listener_->address().rfind(':');
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(std::stoi(listener_->address().substr(colon + 1))));
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    std::thread acceptor([&] { accepted_.push_back(listener_->accept(10s).value_or(nullptr)); });
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    Hello hello{};
    hello.magic = kHelloMagic;
    hello.version = kWireVersion;
    hello.name_length = 6;
    std::memcpy(hello.name, "hostil", 6);
    EXPECT_EQ(::send(fd, &hello, sizeof(hello), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(hello)));
    Hello theirs{};
    EXPECT_EQ(::recv(fd, &theirs, sizeof(theirs), MSG_WAITALL), static_cast<ssize_t>(sizeof(theirs)));
    acceptor.join();
    return fd;
  }

  // True when the victim closed the connection within the time limit.
  static bool closed_by_peer(int fd, std::chrono::milliseconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    char buffer[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return true;
    }
    return false;
  }

  void send_frame(int fd, const FrameHeader& header, std::size_t payload = 0) {
    ::send(fd, &header, sizeof(header), MSG_NOSIGNAL);
    std::vector<char> bytes(payload, 'X');
    if (payload) ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  bool target_untouched() const {
    auto* b = static_cast<const std::uint8_t*>(target_->data());
    return std::all_of(b, b + 4096, [](std::uint8_t v) { return v == 0; });
  }

  // The victim still serves a well-behaved peer afterwards.
  void expect_still_serving() {
    auto client = Context::open({.transport = "tcp"}).value();
    std::shared_ptr<Connection> server_side;
    std::thread acceptor([&] { server_side = listener_->accept(10s).value_or(nullptr); });
    auto connection = client->connect(listener_->address()).value();
    acceptor.join();
    auto source = client->allocate(8, Access::LocalWrite).value();
    std::memcpy(source->data(), "GOODBYTE", 8);
    auto id = connection->write(source->whole().value(), target_->descriptor().at(100)).value();
    auto done = connection->wait(id, 10s);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::Success);
    EXPECT_EQ(std::memcmp(static_cast<char*>(target_->data()) + 100, "GOODBYTE", 8), 0);
  }

  FrameHeader request(FrameType type, std::uint64_t addr, std::uint32_t length, std::uint32_t rkey) const {
    return FrameHeader{.type = type,
                       .status = 0,
                       .flags = 0,
                       .length = length,
                       .addr = addr,
                       .rkey = rkey,
                       .imm = 0,
                       .operand1 = 1,
                       .operand2 = 2,
                       .sequence = 1};
  }

  std::shared_ptr<Context> context_;
  std::shared_ptr<MemoryRegion> target_;
  std::shared_ptr<Listener> listener_;
  std::vector<std::shared_ptr<Connection>> accepted_;
};

TEST_F(Hostile, UnknownFrameTypeClosesTheConnection) {
  int fd = connect_raw();
  FrameHeader header = request(FrameType::Write, 0, 0, 0);
  header.type = static_cast<FrameType>(99);
  send_frame(fd, header);
  EXPECT_TRUE(closed_by_peer(fd));
  ::close(fd);
  expect_still_serving();
}

TEST_F(Hostile, WriteOutOfBoundsIsRefusedAndMemoryUntouched) {
  int fd = connect_raw();
  auto base = reinterpret_cast<std::uint64_t>(target_->data());
  // Starts inside, runs past the end by one byte; then one that wraps around the address space.
  send_frame(fd, request(FrameType::Write, base + 1, 4096, target_->rkey()), 4096);
  EXPECT_TRUE(closed_by_peer(fd));
  ::close(fd);
  fd = connect_raw();
  send_frame(fd, request(FrameType::Write, ~std::uint64_t{0} - 10, 64, target_->rkey()), 64);
  EXPECT_TRUE(closed_by_peer(fd));
  ::close(fd);
  EXPECT_TRUE(target_untouched());
  expect_still_serving();
}

TEST_F(Hostile, HugeLengthWithBadKeyIsDiscardedWithoutAllocation) {
  int fd = connect_raw();
  send_frame(fd, request(FrameType::Write, 0, 0xffffffffu, 12345));
  // The victim NAKs after discarding what it receives; we hang up first: it must notice and not hang.
  ::close(fd);
  EXPECT_TRUE(target_untouched());
  expect_still_serving();
}

TEST_F(Hostile, ResponsesWithoutRequestsAndBadNaksCloseTheConnection) {
  for (FrameType type :
       {FrameType::Ack, FrameType::ReadResponse, FrameType::AtomicResponse, FrameType::Nak}) {
    int fd = connect_raw();
    FrameHeader header = request(type, 0, 16, 0);
    header.status = 200;
    send_frame(fd, header, 16);
    EXPECT_TRUE(closed_by_peer(fd)) << static_cast<int>(type);
    ::close(fd);
  }
  EXPECT_TRUE(target_untouched());
  expect_still_serving();
}

// An ACK may ride on a request (kFrameAcks, operand2 = the sequence it ACKs). A forged one must not complete
// anything of the victim's that was not carried out, nor let the request it rides on touch memory.
TEST_F(Hostile, AcksRidingOnRequestsThatDoNotFitCloseTheConnection) {
  auto base = reinterpret_cast<std::uint64_t>(target_->data());
  auto write_with = [&](FrameType type, std::uint16_t flags, std::uint64_t acked) {
    FrameHeader header = request(type, base, 8, target_->rkey());
    header.flags = flags;
    header.operand2 = acked;
    return header;
  };
  struct Case {
    const char* what;
    FrameHeader header;
    std::size_t payload;
  };
  const Case cases[] = {
      {"an ACK with nothing of the victim's in flight", write_with(FrameType::Write, kFrameAcks, 1), 8},
      {"an unknown flag", write_with(FrameType::Write, 2, 0), 8},
      {"an ACK on a CompareSwap (its operand2 is the swap value)",
       write_with(FrameType::CompareSwap, kFrameAcks, 1), 0},
      {"flags on a response", write_with(FrameType::Ack, kFrameAcks, 1), 0},
  };
  for (const Case& c : cases) {
    int fd = connect_raw();
    send_frame(fd, c.header, c.payload);
    EXPECT_TRUE(closed_by_peer(fd)) << c.what;
    ::close(fd);
  }
  EXPECT_TRUE(target_untouched());

  // An ACK beyond what the victim sent: its own WRITE (never answered by us) must fail, not succeed.
  int fd = connect_raw();
  auto victim = accepted_.back();
  ASSERT_TRUE(victim);
  auto source = context_->allocate(8, Access::LocalWrite).value();
  auto id = victim->write(source->whole().value(), RemoteAddress{.addr = 4096, .rkey = 1}).value();
  FrameHeader theirs{};  // the victim's WRITE frame (sequence 1), then its payload
  ASSERT_EQ(::recv(fd, &theirs, sizeof(theirs), MSG_WAITALL), static_cast<ssize_t>(sizeof(theirs)));
  EXPECT_EQ(theirs.type, FrameType::Write);
  send_frame(fd, write_with(FrameType::Write, kFrameAcks, theirs.sequence + 1000), 8);
  auto done = victim->wait(id, 10s);
  ASSERT_TRUE(done.has_value()) << done.error().message();
  EXPECT_NE(done->status, Status::Success);
  EXPECT_TRUE(closed_by_peer(fd));
  ::close(fd);
  EXPECT_TRUE(target_untouched());
  expect_still_serving();
}

TEST_F(Hostile, MisalignedAndForeignAtomicsAreRefused) {
  auto base = reinterpret_cast<std::uint64_t>(target_->data());
  for (auto [addr, rkey] : {std::pair{base + 3, target_->rkey()}, std::pair{base, target_->rkey() + 1}}) {
    int fd = connect_raw();
    send_frame(fd, request(FrameType::FetchAdd, addr, 8, rkey));
    FrameHeader reply{};
    ASSERT_EQ(::recv(fd, &reply, sizeof(reply), MSG_WAITALL), static_cast<ssize_t>(sizeof(reply)));
    EXPECT_EQ(reply.type, FrameType::Nak);
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  EXPECT_TRUE(target_untouched());
}

TEST_F(Hostile, RandomGarbageNeverCrashes) {
  std::mt19937_64 random(7);
  for (int round = 0; round < 20; ++round) {
    int fd = connect_raw();
    std::vector<std::uint64_t> garbage(64 + random() % 512);
    for (auto& word : garbage) word = random();
    ::send(fd, garbage.data(), garbage.size() * 8, MSG_NOSIGNAL);
    ::close(fd);
  }
  EXPECT_TRUE(target_untouched());
  expect_still_serving();
}

TEST_F(Hostile, WrongHandshakeIsRefused) {
  auto colon = listener_->address().rfind(':');
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(std::stoi(listener_->address().substr(colon + 1))));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  char http[256] = "GET / HTTP/1.0\r\n\r\n";
  ::send(fd, http, sizeof(http), MSG_NOSIGNAL);
  // A stranger's bytes are no business of accept(): it hands out only completed handshakes, and the
  // stranger is closed without a byte about us.
  auto accepted = listener_->accept(500ms);
  ASSERT_FALSE(accepted.has_value());
  EXPECT_EQ(accepted.error().code(), Errc::Timeout);
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);
  ::close(fd);
  expect_still_serving();
}

// The receiver reads a frame header together with what follows it (a read-ahead buffer): frames that arrive
// coalesced, split at any byte, or straddling the buffer's end must all land, in order, exactly. A stream of
// small and 4000-byte WRITEs (more than the 16 KiB read-ahead) is sent once in one piece and once in
// random pieces of 1-97 bytes; the target's bytes must equal the same writes applied in order.
TEST_F(Hostile, WritesCoalescedOrSplitAtAnyByteAllLandInOrder) {
  const auto base = reinterpret_cast<std::uint64_t>(target_->data());
  constexpr std::uint64_t kFrames = 64;
  for (bool split : {false, true}) {
    std::vector<std::uint8_t> expected(4096, 0);
    std::memset(target_->data(), 0, 4096);
    std::vector<char> stream;
    for (std::uint64_t k = 0; k < kFrames; ++k) {
      const std::uint32_t length = k % 16 == 5 ? 4000 : 1 + static_cast<std::uint32_t>(k * 37 % 200);
      const std::uint64_t offset = length == 4000 ? k % 64 : k * 61 % (4096 - 256);
      FrameHeader header = request(FrameType::Write, base + offset, length, target_->rkey());
      header.sequence = k + 1;
      const char* raw = reinterpret_cast<const char*>(&header);
      stream.insert(stream.end(), raw, raw + sizeof(header));
      const auto value = static_cast<char>(k + 1 + (split ? 100 : 0));
      stream.insert(stream.end(), length, value);
      std::fill_n(expected.begin() + static_cast<std::ptrdiff_t>(offset), length,
                  static_cast<std::uint8_t>(value));
    }
    ASSERT_GT(stream.size(), 16u * 1024);
    int fd = connect_raw();
    std::mt19937 random(7);
    for (std::size_t at = 0; at < stream.size();) {
      std::size_t piece =
          split ? std::min<std::size_t>(1 + random() % 97, stream.size() - at) : stream.size() - at;
      ssize_t n = ::send(fd, stream.data() + at, piece, MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      at += static_cast<std::size_t>(n);
    }
    // Cumulative ACKs: the last one answers every frame.
    std::uint64_t acked = 0;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (acked < kFrames && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      FrameHeader ack{};
      ASSERT_EQ(::recv(fd, &ack, sizeof(ack), MSG_WAITALL), static_cast<ssize_t>(sizeof(ack)));
      ASSERT_EQ(ack.type, FrameType::Ack);
      acked = ack.sequence;
    }
    EXPECT_EQ(acked, kFrames) << (split ? "split" : "coalesced");
    EXPECT_EQ(std::memcmp(target_->data(), expected.data(), 4096), 0) << (split ? "split" : "coalesced");
    ::close(fd);
  }
  expect_still_serving();
}

}  // namespace
}  // namespace rdmakit::tcp
