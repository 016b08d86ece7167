#include "perf/control.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "perf/params.hpp"

namespace rdmakit::perf {

const rdmakit::detail::FrameSpec kControlSpec{.name = "rdmakit-perf control",
                                              .magic = 0x50524b52,  // "RKRP"
                                              .version = 2,
                                              .max_type = static_cast<std::uint8_t>(MessageKind::Verdict),
                                              .max_payload = kPayload};

void ControlMessage::set_text(const std::string& message) {
  std::size_t n = std::min(message.size(), sizeof(text) - 1);
  std::memcpy(text, message.data(), n);
  text[n] = '\0';
}

std::string ControlMessage::get_text() const { return std::string(text, strnlen(text, sizeof(text))); }

Result<Layout> plan_layout(std::uint32_t connections, std::uint64_t largest, bool two_areas) {
  if (connections == 0 || connections > kMaxConnections)
    return fail(Errc::ProtocolError, "rdmakit-perf: " + std::to_string(connections) + " connections (1.." +
                                         std::to_string(kMaxConnections) + ")");
  if (largest > kMaxMessageSize)
    return fail(Errc::ProtocolError,
                "rdmakit-perf: message size " + std::to_string(largest) + " is over 2 GiB");
  // With largest <= 2^31 and connections <= 2^16, none of these can wrap (at most 2^49).
  const std::uint64_t area = (std::max<std::uint64_t>(largest, 8) + 4095) / 4096 * 4096;
  Layout layout;
  layout.send_offset = two_areas ? area : 0;
  layout.slot_bytes = area + layout.send_offset;
  layout.total = layout.slot_bytes * connections;
  return layout;
}

namespace {
using Payload = std::array<std::byte, kPayload>;

std::span<const std::byte> encode_payload(const ControlMessage& m, Payload& out) {
  rdmakit::detail::PayloadWriter writer(out);
  writer.put(m.test).put(m.ok).put(m.bidirectional).put(m.connections).put(m.tx_depth);
  writer.put(m.size).put(m.count).put(m.ops).put(m.seconds).put(m.region).put(m.text);
  return writer.written();
}
}  // namespace

std::vector<std::byte> encode_message(const ControlMessage& m) {
  Payload payload;
  std::vector<std::byte> out(kControlSpec.max_frame());
  auto size = rdmakit::detail::encode_frame(kControlSpec, static_cast<std::uint8_t>(m.kind),
                                            encode_payload(m, payload), out);
  out.resize(size.value_or(0));
  return out;
}

Result<ControlMessage> decode_payload(const rdmakit::detail::Frame& frame) {
  ControlMessage m;
  m.kind = static_cast<MessageKind>(frame.type);  // the frame checked it is a known kind
  rdmakit::detail::PayloadReader in(kControlSpec, frame.payload);
  in.get(m.test).get(m.ok).get(m.bidirectional).get(m.connections).get(m.tx_depth);
  in.get(m.size).get(m.count).get(m.ops).get(m.seconds).get(m.region).get(m.text);
  if (auto ok = in.finish(); !ok) return std::unexpected(ok.error());
  if (m.ok > 1 || m.bidirectional > 1)
    return fail(Errc::ProtocolError, "control channel: a flag that is neither 0 nor 1");
  m.text[sizeof(m.text) - 1] = '\0';  // the peer's text ends inside the message
  return m;
}

Result<ControlMessage> decode_message(std::span<const std::byte> bytes) {
  auto frame = rdmakit::detail::decode_frame(kControlSpec, bytes);
  if (!frame) return std::unexpected(frame.error());
  return decode_payload(*frame);
}

Result<void> check_hello(const ControlMessage& hello) {
  if (hello.test > static_cast<std::uint8_t>(Test::AtomicLat))
    return fail(Errc::ProtocolError, "Hello: unknown test " + std::to_string(hello.test));
  const auto test = static_cast<Test>(hello.test);
  if (hello.tx_depth == 0 || hello.tx_depth > kMaxTxDepth)
    return fail(Errc::ProtocolError, "Hello: tx depth " + std::to_string(hello.tx_depth) + " (1.." +
                                         std::to_string(kMaxTxDepth) + ")");
  if (hello.bidirectional && test != Test::WriteBw && test != Test::ReadBw)
    return fail(Errc::ProtocolError, "Hello: bidirectional " + std::string(to_string(test)));
  if (!is_bandwidth(test) && hello.connections != 1)
    return fail(Errc::ProtocolError,
                "Hello: a latency test over " + std::to_string(hello.connections) + " connections");
  if (hello.size < 8)
    return fail(Errc::ProtocolError, "Hello: largest size " + std::to_string(hello.size) + " (at least 8)");
  auto layout = plan_layout(hello.connections, hello.size, true);
  if (!layout) return std::unexpected(layout.error());
  if (hello.ops != 0 && test != Test::WriteBw && test != Test::ReadBw)
    return fail(Errc::ProtocolError, "Hello: a working set for " + std::string(to_string(test)));
  if (hello.ops > hello.size)
    return fail(Errc::ProtocolError, "Hello: working set " + std::to_string(hello.ops) +
                                         " is larger than the buffers' " + std::to_string(hello.size));
  return {};
}

Result<void> check_begin(const ControlMessage& begin, const ControlMessage& hello) {
  const auto test = static_cast<Test>(hello.test);
  if (begin.size > hello.size)
    return fail(Errc::ProtocolError, "Begin: size " + std::to_string(begin.size) +
                                         " is larger than the Hello's " + std::to_string(hello.size) +
                                         " that sized the buffers");
  if (begin.size == 0 && !is_bandwidth(test))
    return fail(Errc::ProtocolError, "Begin: size 0 for a latency test");
  if (test == Test::AtomicLat && begin.size != 8)
    return fail(Errc::ProtocolError, "Begin: atomic_lat size is not 8");
  if (!std::isfinite(begin.seconds) || begin.seconds < 0 || begin.seconds > kMaxSeconds)
    return fail(Errc::ProtocolError, "Begin: duration out of range");
  if (begin.count > kMaxOperations || begin.ops > kMaxOperations)
    return fail(Errc::ProtocolError, "Begin: more than 2^48 operations");
  return {};
}

Result<void> check_end(const ControlMessage& end, const ControlMessage& begin) {
  if (end.size != begin.size)
    return fail(Errc::ProtocolError,
                "End: size " + std::to_string(end.size) + " closes a Begin of " + std::to_string(begin.size));
  return {};
}

Result<void> check_verdict(const ControlMessage& verdict) {
  if (!std::isfinite(verdict.seconds) || verdict.seconds < 0 || verdict.seconds > kMaxSeconds)
    return fail(Errc::ProtocolError, "Verdict: the server's timed span is out of range");
  return {};
}

Result<ControlChannel> ControlChannel::open(Context& context, std::shared_ptr<Connection> connection) {
  auto channel = rdmakit::detail::MessageChannel::open(context, std::move(connection), kControlSpec,
                                                       {.receives = 1,
                                                        .keep_posted = true,
                                                        .owns_recv_queue = true,
                                                        .send_timeout = std::chrono::seconds(30)});
  if (!channel) return std::unexpected(channel.error());
  if (auto ok = channel->expect(); !ok) return std::unexpected(ok.error());
  return ControlChannel(std::move(*channel));
}

Result<void> ControlChannel::send(const ControlMessage& message) {
  Payload payload;
  return channel_.send(static_cast<std::uint8_t>(message.kind), encode_payload(message, payload));
}

Result<ControlMessage> ControlChannel::receive(std::chrono::milliseconds timeout) {
  auto frame = channel_.receive(timeout);
  if (!frame) return std::unexpected(frame.error());
  return decode_payload(*frame);
}

Result<std::optional<ControlMessage>> ControlChannel::try_receive() {
  auto frame = channel_.try_receive();
  if (!frame) return std::unexpected(frame.error());
  if (!*frame) return std::optional<ControlMessage>{};
  auto message = decode_payload(**frame);
  if (!message) return std::unexpected(message.error());
  return std::optional<ControlMessage>(*message);
}

Result<ControlMessage> ControlChannel::expect(MessageKind kind, std::chrono::milliseconds timeout) {
  auto message = receive(timeout);
  if (!message) return message;
  if (message->kind != kind)
    return fail(Errc::ProtocolError, "control channel: expected message " +
                                         std::to_string(static_cast<int>(kind)) + ", got " +
                                         std::to_string(static_cast<int>(message->kind)));
  return message;
}

}  // namespace rdmakit::perf
