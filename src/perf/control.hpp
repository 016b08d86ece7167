// The control channel between the two sides of a run: small messages of the one message channel over a
// connection of its own (perftest uses a side TCP socket; using rdmakit itself keeps the tool to one
// transport and one address). One receive is always posted, so a message never waits for a receiver.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/message_channel.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::perf {

enum class MessageKind : std::uint8_t {
  Hello = 1,  // client -> server: the test and its shape, and the client's descriptor
  Welcome,    // server -> client: the server's descriptor
  Begin,      // client -> server: one size is about to run
  Ready,      // server -> client: buffers prepared, receives posted
  End,        // client -> server: the size is done; `count` operations were posted in all
  Verdict,    // server -> client: ok or a failed check; a bidirectional server's own figures
};

struct ControlMessage {
  MessageKind kind = MessageKind::Hello;
  std::uint8_t test = 0;
  std::uint8_t ok = 1;
  std::uint8_t bidirectional = 0;
  std::uint32_t connections = 0;
  std::uint32_t tx_depth = 0;
  std::uint64_t size = 0;   // Hello: the largest size; Begin/End: this size
  std::uint64_t count = 0;  // End: operations posted per connection, warm-up included
  // Verdict (bidirectional): operations the server timed; Hello: the client's --working-set (0: none);
  // Begin: warm-up operations per connection
  std::uint64_t ops = 0;
  double seconds = 0;            // Verdict (bidirectional): the server's timed span
  std::uint8_t region[48] = {};  // Hello/Welcome: RemoteRegion::serialize()
  char text[112] = {};           // Verdict: what failed

  void set_text(const std::string& message);
  std::string get_text() const;
};
// On the wire: a frame of the one message channel (core/message_channel.hpp), magic "RKRP", version 2,
// type = kind, then the fields in declaration order without padding (kPayload bytes).
inline constexpr std::size_t kPayload = 3 + 4 + 4 + 4 * 8 + 48 + 112;
extern const rdmakit::detail::FrameSpec kControlSpec;

// What a peer's messages may ask for (the same bounds parse_args puts on a command line).
inline constexpr std::uint64_t kMaxMessageSize = std::uint64_t{1} << 31;
inline constexpr std::uint32_t kMaxConnections = 65536;
inline constexpr std::uint32_t kMaxTxDepth = 65536;
inline constexpr double kMaxSeconds = 1e6;
inline constexpr std::uint64_t kMaxOperations = std::uint64_t{1} << 48;

// The buffer layout both sides derive from the Hello: `connections` slots of slot_bytes; a slot's send
// area starts at send_offset (0: one area). Checked arithmetic: an error, never a wrapped size.
struct Layout {
  std::uint64_t send_offset = 0;
  std::uint64_t slot_bytes = 0;
  std::uint64_t total = 0;
};
Result<Layout> plan_layout(std::uint32_t connections, std::uint64_t largest, bool two_areas);

// The peer's bytes as a message: a frame of kControlSpec (magic, version, a known kind, the right length),
// flags 0 or 1. Pure, fuzzed.
Result<ControlMessage> decode_message(std::span<const std::byte> bytes);
Result<ControlMessage> decode_payload(const rdmakit::detail::Frame& frame);
// The whole frame, as the peer receives it.
std::vector<std::byte> encode_message(const ControlMessage& message);
// A client's Hello, as the server checks it: a known test, counts and sizes in bounds, a layout that fits.
Result<void> check_hello(const ControlMessage& hello);
// A Begin against the Hello it follows: its size fits the buffers the Hello sized, its counts and time
// are in bounds.
Result<void> check_begin(const ControlMessage& begin, const ControlMessage& hello);
// An End against the Begin it closes: the same size.
Result<void> check_end(const ControlMessage& end, const ControlMessage& begin);
// A server's Verdict, as the client checks it: figures a report can hold.
Result<void> check_verdict(const ControlMessage& verdict);

// The control connection's channel: one receive always posted (reposted as each message is taken), and
// receive() sleeps in the control connection's own queue, whatever the run's completion mode.
class ControlChannel {
 public:
  static Result<ControlChannel> open(Context& context, std::shared_ptr<Connection> connection);

  Result<void> send(const ControlMessage& message);
  // Waits up to `timeout` for the next message; Errc::Timeout when none came, ProtocolError on garbage.
  Result<ControlMessage> receive(std::chrono::milliseconds timeout);
  // The next message if one has arrived, without waiting.
  Result<std::optional<ControlMessage>> try_receive();
  // Waits for a message of `kind`; anything else is a protocol error.
  Result<ControlMessage> expect(MessageKind kind, std::chrono::milliseconds timeout);

 private:
  explicit ControlChannel(rdmakit::detail::MessageChannel channel) : channel_(std::move(channel)) {}
  rdmakit::detail::MessageChannel channel_;
};

}  // namespace rdmakit::perf
