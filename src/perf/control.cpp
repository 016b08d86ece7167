#include "perf/control.hpp"

#include <algorithm>
#include <cstring>

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
  if (!completion.ok())
    return fail(Errc::ConnectionBroken, "control channel: " + std::string(to_string(completion.status)) +
                                            " (the peer went away?)");
  ControlMessage message;
  std::memcpy(&message, memory_->data(), kSlot);
  if (completion.bytes != kSlot || message.magic != ControlMessage::kMagic)
    return fail(Errc::ProtocolError, "control channel: the peer is not an rdmakit-perf of this version");
  // The peer may hang up right after its last message (the final End, a refusal): that message still
  // counts, and a failed repost shows up on the next receive instead.
  if (auto ok = post_receive(); !ok) recv_id_ = kNoReceive;
  return message;
}

Result<ControlMessage> ControlChannel::receive(std::chrono::milliseconds timeout) {
  if (recv_id_ == kNoReceive) return fail(Errc::ConnectionBroken, "control channel: the peer has gone");
  auto done = connection_->recv_cq().wait_for(recv_id_, timeout);
  if (!done) return std::unexpected(done.error());
  return take(*done);
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
    return fail(Errc::ProtocolError, "control channel: expected message " + std::to_string(static_cast<int>(kind)) +
                                         ", got " + std::to_string(static_cast<int>(message->kind)));
  return message;
}

}  // namespace rdmakit::perf
