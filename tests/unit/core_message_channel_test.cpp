// The one message channel (src/core/message_channel.hpp): its codec against malformed frames, and the
// channel over a tcp loopback connection against a peer that sends too much, the wrong thing, nothing, or
// goes away. Each case ends in a Result error well inside its deadline.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <future>
#include <vector>

#include "core/message_channel.hpp"
#include "support/test_support.hpp"

namespace rdmakit::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr FrameSpec kSpec{
    .name = "test channel", .magic = 0x54534554, .version = 3, .max_type = 4, .max_payload = 64};

std::vector<std::byte> bytes_of(std::string_view text) {
  auto b = std::as_bytes(std::span(text));
  return {b.begin(), b.end()};
}

std::vector<std::byte> frame(std::uint8_t type, std::string_view payload) {
  std::vector<std::byte> out(kSpec.max_frame());
  out.resize(encode_frame(kSpec, type, bytes_of(payload), out).value());
  return out;
}

TEST(FrameCodec, RoundTripsAndRejectsEveryMalformation) {
  auto good = frame(2, "hello");
  ASSERT_EQ(good.size(), kFrameHeader + 5);
  auto decoded = decode_frame(kSpec, good);
  ASSERT_TRUE(decoded) << decoded.error().describe();
  EXPECT_EQ(decoded->type, 2);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(decoded->payload.data()), decoded->payload.size()),
            "hello");

  auto code = [](std::vector<std::byte> bytes) {
    auto r = decode_frame(kSpec, bytes);
    return r ? Errc{} : r.error().code();
  };
  EXPECT_EQ(code({}), Errc::ProtocolError);  // empty
  EXPECT_EQ(code(std::vector<std::byte>(good.begin(), good.begin() + 7)),
            Errc::ProtocolError);                                                              // short header
  EXPECT_EQ(code(std::vector<std::byte>(good.begin(), good.end() - 1)), Errc::ProtocolError);  // truncated
  auto bad = good;
  bad.push_back(std::byte{0});
  EXPECT_EQ(code(bad), Errc::ProtocolError);  // trailing byte
  bad = good, bad[0] = std::byte{'X'};
  EXPECT_EQ(code(bad), Errc::ProtocolError);  // magic
  bad = good, bad[4] = std::byte{2};
  EXPECT_EQ(code(bad), Errc::NotSupported);  // another version
  bad = good, bad[5] = std::byte{0};
  EXPECT_EQ(code(bad), Errc::ProtocolError);  // type 0
  bad = good, bad[5] = std::byte{5};
  EXPECT_EQ(code(bad), Errc::ProtocolError);  // type past max_type
  bad = good, bad[6] = std::byte{0xff}, bad[7] = std::byte{0xff};
  EXPECT_EQ(code(bad), Errc::ProtocolError);  // a length that lies
  std::vector<std::byte> big(kSpec.max_frame() + 1);
  std::memcpy(big.data(), good.data(), kFrameHeader);
  EXPECT_EQ(code(big), Errc::ProtocolError);  // over the spec's bound, whatever the header says
  EXPECT_EQ(decode_frame(kSpec, good, 3).error().code(), Errc::ProtocolError);  // unexpected type

  std::vector<std::byte> out(kSpec.max_frame());
  EXPECT_FALSE(encode_frame(kSpec, 1, std::vector<std::byte>(kSpec.max_payload + 1), out));
  EXPECT_FALSE(encode_frame(kSpec, 0, {}, out));
  EXPECT_FALSE(encode_frame(kSpec, 1, bytes_of("hello"), std::span(out).first(10)));
}

TEST(FrameCodec, PayloadReaderRefusesShortAndLongPayloads) {
  std::array<std::byte, 16> buffer{};
  PayloadWriter writer(buffer);
  writer.put(std::uint32_t{7}).put(std::uint64_t{9});
  ASSERT_TRUE(writer.ok());
  writer.put(std::uint64_t{1});
  EXPECT_FALSE(writer.ok()) << "20 bytes fit in 16";

  std::uint32_t a = 0;
  std::uint64_t b = 0;
  PayloadReader exact(kSpec, std::span(buffer).first(12));
  EXPECT_TRUE(exact.get(a).get(b).finish());
  EXPECT_EQ(a, 7u);
  EXPECT_EQ(b, 9u);
  PayloadReader shorter(kSpec, std::span(buffer).first(11));
  EXPECT_FALSE(shorter.get(a).get(b).finish());
  PayloadReader longer(kSpec, std::span(buffer).first(13));
  EXPECT_FALSE(longer.get(a).get(b).finish());
}

// Two connected tcp endpoints, each side with the raw connection; `channel` is opened on the acceptor.
struct Link {
  std::shared_ptr<Context> near = Context::open(Options{.transport = "tcp"}).value();
  std::shared_ptr<Context> far = Context::open(Options{.transport = "tcp"}).value();
  std::shared_ptr<Listener> listener = near->listen().value();
  std::vector<std::shared_ptr<MemoryRegion>> sent;  // send_raw's buffers: they outlive the connections
  std::shared_ptr<Connection> peer, mine;
  Link() {
    auto accepted = std::async(std::launch::async, [&] { return listener->accept(5s); });
    peer = far->connect(listener->address()).value();
    mine = accepted.get().value();
  }
  MessageChannel channel(ChannelOptions options = {}) {
    return MessageChannel::open(*near, mine, kSpec, options).value();
  }
  // The peer's side as a channel too.
  MessageChannel remote(ChannelOptions options = {}) {
    return MessageChannel::open(*far, peer, kSpec, options).value();
  }
  // A SEND of raw bytes from the peer, past any codec.
  void send_raw(const std::vector<std::byte>& bytes) {
    auto region = far->allocate(bytes.size(), Access::LocalWrite).value();
    std::memcpy(region->data(), bytes.data(), bytes.size());
    ASSERT_TRUE(peer->send(region->slice(0, static_cast<std::uint32_t>(bytes.size()))));
    sent.push_back(std::move(region));
  }
};

std::string text(const Frame& f) {
  return {reinterpret_cast<const char*>(f.payload.data()), f.payload.size()};
}

TEST(MessageChannel, CarriesMessagesBothWaysAndKeepsAReceivePosted) {
  Link link;
  auto mine = link.channel({.receives = 2, .keep_posted = true});
  auto theirs = link.remote();
  ASSERT_TRUE(mine.expect());
  ASSERT_TRUE(mine.expect());
  EXPECT_FALSE(mine.expect()) << "a third receive where two were allowed";
  // Three messages back to back: the third lands only because the first receive was reposted.
  ASSERT_TRUE(theirs.send(1, bytes_of("one")));
  ASSERT_TRUE(theirs.send(2, bytes_of("two")));
  auto first = mine.receive(1, 2s);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_EQ(text(*first), "one");
  ASSERT_TRUE(theirs.send(3, bytes_of("three")));
  auto second = mine.receive(2s);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->type, 2);
  EXPECT_EQ(text(*second), "two");
  auto third = mine.receive(3, 2s);
  ASSERT_TRUE(third);
  EXPECT_EQ(text(*third), "three");
  ASSERT_TRUE(theirs.expect());
  ASSERT_TRUE(mine.send(4, {}));
  auto answer = theirs.receive(4, 2s);
  ASSERT_TRUE(answer);
  EXPECT_TRUE(answer->payload.empty());
}

// A window of sends in flight: posts never wait while fewer than `sends` are unacknowledged (a server's
// answers are not spaced by its peer's acknowledgements), and each keeps its own buffer, so every message
// arrives whole and in order.
TEST(MessageChannel, AWindowOfSendsLeavesWithoutWaitingAndArrivesInOrder) {
  Link link;
  constexpr std::uint32_t kWindow = 16;
  auto theirs = link.remote({.receives = kWindow, .keep_posted = true});
  ASSERT_TRUE(theirs.expect(kWindow));
  auto mine = link.channel({.send_timeout = 0ms, .sends = kWindow});
  for (std::uint32_t round = 0; round < 3; ++round) {
    for (std::uint32_t i = 0; i < kWindow; ++i) {
      auto posted = mine.post(1, bytes_of("message " + std::to_string(round * kWindow + i)));
      ASSERT_TRUE(posted) << "post " << i << " of a window of " << kWindow << ": "
                          << posted.error().describe();
    }
    for (std::uint32_t i = 0; i < kWindow; ++i) {
      auto got = theirs.receive(1, 2s);
      ASSERT_TRUE(got) << got.error().describe();
      EXPECT_EQ(text(*got), "message " + std::to_string(round * kWindow + i));
    }
    // send() posts one more and waits for every send in flight (its post fails with Timeout, sending
    // nothing, while the window is full and the oldest is not acknowledged yet): the next window starts
    // empty.
    while (true) {
      auto sent = mine.send(1, bytes_of("drain"), 5s);
      if (sent) break;
      ASSERT_EQ(sent.error().code(), Errc::Timeout) << sent.error().describe();
    }
    auto drain = theirs.receive(1, 2s);
    ASSERT_TRUE(drain && text(*drain) == "drain");
  }
  auto bad = MessageChannel::open(*link.near, link.mine, kSpec, {.sends = 0});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Errc::InvalidArgument);
}

TEST(MessageChannel, ATimeoutIsReportedAndNotSticky) {
  Link link;
  auto mine = link.channel();
  auto start = Clock::now();
  auto none = mine.receive(100ms);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Errc::Timeout);
  EXPECT_LT(Clock::now() - start, 2s);
  auto nothing = mine.try_receive();
  ASSERT_TRUE(nothing);
  EXPECT_FALSE(nothing->has_value());
  link.send_raw(frame(1, "late"));
  auto late = mine.receive(2s);  // the receive stayed posted
  ASSERT_TRUE(late) << late.error().describe();
  EXPECT_EQ(text(*late), "late");
}

TEST(MessageChannel, MalformedAndUnexpectedMessagesAreStickyProtocolErrors) {
  {
    Link link;
    auto mine = link.channel();
    ASSERT_TRUE(mine.expect());  // a SEND that meets no receive breaks the connection (RNR)
    auto bad = frame(1, "x");
    bad[0] = std::byte{0};
    link.send_raw(bad);
    auto got = mine.receive(2s);
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error().code(), Errc::ProtocolError) << got.error().describe();
    link.send_raw(frame(1, "fine"));
    auto after = mine.receive(2s);
    ASSERT_FALSE(after) << "a channel that met garbage went on";
    EXPECT_EQ(after.error().code(), Errc::ProtocolError);
  }
  {
    Link link;
    auto mine = link.channel();
    ASSERT_TRUE(mine.expect());
    link.send_raw(frame(2, "not a 1"));
    auto got = mine.receive(1, 2s);
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error().code(), Errc::ProtocolError);
  }
  {
    Link link;
    auto mine = link.channel();
    ASSERT_TRUE(mine.expect());
    link.send_raw(std::vector<std::byte>(3));  // shorter than a header
    EXPECT_EQ(mine.receive(2s).error().code(), Errc::ProtocolError);
  }
}

TEST(MessageChannel, AMessageLargerThanTheBufferFailsTheReceive) {
  Link link;
  auto mine = link.channel();
  ASSERT_TRUE(mine.expect());
  link.send_raw(std::vector<std::byte>(kSpec.max_frame() + 1000, std::byte{0x41}));
  auto got = mine.receive(2s);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code(), Errc::ProtocolError) << got.error().describe();
  EXPECT_NE(got.error().message().find("larger than"), std::string::npos) << got.error().message();
}

TEST(MessageChannel, APeerThatGoesAwayEndsTheWaitAtOnce) {
  Link link;
  auto mine = link.channel();
  ASSERT_TRUE(mine.expect());
  auto start = Clock::now();
  auto closer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    link.peer->close();
  });
  auto got = mine.receive(10s);
  closer.get();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code(), Errc::ConnectionBroken) << got.error().describe();
  EXPECT_LT(Clock::now() - start, 5s) << "waited out the timeout instead of seeing the close";
  EXPECT_FALSE(mine.send(1, bytes_of("anyone?")));
  EXPECT_EQ(mine.receive(1s).error().code(), Errc::ConnectionBroken);  // sticky
}

TEST(MessageChannel, ClosesTheConnectionUnlessReleasedWithNothingPosted) {
  Link link;
  {
    auto mine = link.channel();
    ASSERT_TRUE(mine.expect());
    EXPECT_EQ(mine.release().error().code(), Errc::InvalidArgument) << "released with a receive posted";
  }
  EXPECT_FALSE(link.mine->health()) << "a channel left a receive posted into its freed buffer";

  Link other;
  {
    auto mine = other.channel();
    auto theirs = other.remote();
    ASSERT_TRUE(mine.expect());
    ASSERT_TRUE(theirs.send(1, bytes_of("bye")));
    ASSERT_TRUE(mine.receive(1, 2s));
    EXPECT_TRUE(mine.release());
    EXPECT_TRUE(theirs.release());
  }
  EXPECT_TRUE(other.mine->health());
  EXPECT_TRUE(other.peer->health());
}

}  // namespace
}  // namespace rdmakit::detail
