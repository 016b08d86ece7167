#include "perf/control.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "perf/params.hpp"

namespace rdmakit::perf {
namespace {
constexpr std::uint32_t kSlot = sizeof(ControlMessage);
}

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

Result<ControlMessage> decode_message(std::span<const std::byte> bytes) {
  ControlMessage message;
  if (bytes.size() != sizeof(message))
    return fail(Errc::ProtocolError, "control channel: a message of " + std::to_string(bytes.size()) +
                                         " bytes, not " + std::to_string(sizeof(message)));
  std::memcpy(&message, bytes.data(), sizeof(message));
  if (message.magic != ControlMessage::kMagic)
    return fail(Errc::ProtocolError, "control channel: the peer is not an rdmakit-perf of this version");
  auto kind = static_cast<std::uint8_t>(message.kind);
  if (kind < static_cast<std::uint8_t>(MessageKind::Hello) ||
      kind > static_cast<std::uint8_t>(MessageKind::Verdict))
    return fail(Errc::ProtocolError, "control channel: unknown message kind " + std::to_string(kind));
  if (message.ok > 1 || message.bidirectional > 1)
    return fail(Errc::ProtocolError, "control channel: a flag that is neither 0 nor 1");
  message.text[sizeof(message.text) - 1] = '\0';  // the peer's text ends inside the message
  return message;
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
  auto memory = context.allocate(2 * kSlot, Access::LocalWrite);
  if (!memory) return std::unexpected(memory.error());
  ControlChannel channel(std::move(connection), std::move(*memory));
  if (auto ok = channel.post_receive(); !ok) return std::unexpected(ok.error());
  return channel;
}

Result<void> ControlChannel::post_receive() {
  auto id = connection_->post_recv(memory_->slice(0, kSlot));
  if (!id) return std::unexpected(id.error());
  recv_id_ = *id;
  return {};
}

Result<void> ControlChannel::send(const ControlMessage& message) {
  std::memcpy(static_cast<char*>(memory_->data()) + kSlot, &message, kSlot);
  auto id = connection_->send(memory_->slice(kSlot, kSlot));
  if (!id) return std::unexpected(id.error());
  auto done = connection_->wait(*id, std::chrono::seconds(30));
  if (!done) return std::unexpected(done.error());
  if (!done->ok())
    return fail(Errc::TransportFailure, "control message failed: " + std::string(to_string(done->status)));
  return {};
}

Result<ControlMessage> ControlChannel::take(const Completion& completion) {
  if (!completion.ok()) {
    // A flushed receive only says that something else failed first: name that first failure.
    std::string cause;
    if (auto health = connection_->health(); !health)
      cause = ": the connection failed first with " + health.error().describe();
    return fail(Errc::ConnectionBroken, "control channel: " + std::string(to_string(completion.status)) +
                                            " (the peer went away?)" + cause);
  }
  if (completion.bytes != kSlot)
    return fail(Errc::ProtocolError, "control channel: a message of " + std::to_string(completion.bytes) +
                                         " bytes, not " + std::to_string(kSlot));
  auto message = decode_message(std::span(static_cast<const std::byte*>(memory_->data()), kSlot));
  if (!message) return message;
  // The peer may hang up right after its last message (the final End, a refusal): that message still
  // counts, and a failed repost shows up on the next receive instead.
  if (auto ok = post_receive(); !ok) recv_id_ = kNoReceive;
  return *message;
}

Result<ControlMessage> ControlChannel::receive(std::chrono::milliseconds timeout) {
  if (recv_id_ == kNoReceive) return fail(Errc::ConnectionBroken, "control channel: the peer has gone");
  // Sleeps, whatever the run's completion mode: a server waiting out a one-sided test must leave the
  // CPU to the client (perftest's server sleeps in a socket read), and a spinning wait that reads the
  // clock on every turn costs a system call each time where the clock source has no vDSO support.
  // The queue is the control connection's own, holding this one receive.
  Completion done;
  auto got = connection_->recv_cq().wait(std::span(&done, 1), timeout, WaitMode::Block);
  if (!got) return std::unexpected(got.error());
  if (*got == 0)
    return fail(Errc::Timeout,
                "control channel: no message within " + std::to_string(timeout.count()) + " ms");
  if (done.id != recv_id_)
    return fail(Errc::ProtocolError, "control channel: completion " + std::to_string(done.id) +
                                         " is not the posted receive " + std::to_string(recv_id_));
  return take(done);
}

Result<std::optional<ControlMessage>> ControlChannel::try_receive() {
  if (recv_id_ == kNoReceive) return fail(Errc::ConnectionBroken, "control channel: the peer has gone");
  auto done = connection_->recv_cq().wait_for(recv_id_, std::chrono::nanoseconds(0));
  if (!done) {
    if (done.error().code() == Errc::Timeout) return std::optional<ControlMessage>{};
    return std::unexpected(done.error());
  }
  auto message = take(*done);
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
