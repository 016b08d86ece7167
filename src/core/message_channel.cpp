#include "core/message_channel.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace rdmakit::detail {
namespace {

// A channel is a handful of receives (the handshakes post two ahead); more is a local bug, and the bound
// keeps what one channel registers small.
constexpr std::uint32_t kMaxReceives = 64;

std::string prefix(const FrameSpec& spec) { return std::string(spec.name) + ": "; }

std::string milliseconds(std::chrono::nanoseconds t) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(t).count()) + " ms";
}

template <typename T>
T load(std::span<const std::byte> bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

Result<void> check_spec(const FrameSpec& spec, const ChannelOptions& options) {
  if (spec.max_type == 0 || spec.max_payload > kMaxFramePayload)
    return fail(Errc::InvalidArgument, prefix(spec) + "a frame spec without types or over 4 KiB");
  if (options.receives == 0 || options.receives > kMaxReceives)
    return fail(Errc::InvalidArgument, prefix(spec) + "1.." + std::to_string(kMaxReceives) + " receives");
  if (options.sends == 0 || options.sends > kMaxReceives)
    return fail(Errc::InvalidArgument, prefix(spec) + "1.." + std::to_string(kMaxReceives) + " sends");
  return {};
}

}  // namespace

Result<std::size_t> encode_frame(const FrameSpec& spec, std::uint8_t type, std::span<const std::byte> payload,
                                 std::span<std::byte> out) {
  if (type == 0 || type > spec.max_type)
    return fail(Errc::InvalidArgument, prefix(spec) + "no message type " + std::to_string(type));
  if (payload.size() > spec.max_payload || out.size() < kFrameHeader + payload.size())
    return fail(Errc::InvalidArgument, prefix(spec) + "a payload of " + std::to_string(payload.size()) +
                                           " bytes (at most " + std::to_string(spec.max_payload) + ")");
  auto length = static_cast<std::uint16_t>(payload.size());
  std::memcpy(out.data(), &spec.magic, 4);
  out[4] = static_cast<std::byte>(spec.version);
  out[5] = static_cast<std::byte>(type);
  std::memcpy(out.data() + 6, &length, 2);
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeader, payload.data(), payload.size());
  return kFrameHeader + payload.size();
}

Result<Frame> decode_frame(const FrameSpec& spec, std::span<const std::byte> bytes) {
  if (bytes.size() < kFrameHeader || bytes.size() > spec.max_frame())
    return fail(Errc::ProtocolError, prefix(spec) + "a message of " + std::to_string(bytes.size()) +
                                         " bytes (" + std::to_string(kFrameHeader) + ".." +
                                         std::to_string(spec.max_frame()) + ")");
  if (load<std::uint32_t>(bytes, 0) != spec.magic)
    return fail(Errc::ProtocolError, prefix(spec) + "the peer does not speak this protocol (bad magic)");
  auto version = static_cast<std::uint8_t>(bytes[4]);
  if (version != spec.version)
    return fail(Errc::NotSupported, prefix(spec) + "protocol version " + std::to_string(version) +
                                        " (this build speaks " + std::to_string(spec.version) + ")");
  Frame frame{.type = static_cast<std::uint8_t>(bytes[5])};
  if (frame.type == 0 || frame.type > spec.max_type)
    return fail(Errc::ProtocolError, prefix(spec) + "unknown message type " + std::to_string(frame.type));
  auto length = load<std::uint16_t>(bytes, 6);
  if (kFrameHeader + length != bytes.size())
    return fail(Errc::ProtocolError, prefix(spec) + "a header announcing " + std::to_string(length) +
                                         " payload bytes in a message of " + std::to_string(bytes.size()));
  frame.payload = bytes.subspan(kFrameHeader);
  return frame;
}

Result<Frame> decode_frame(const FrameSpec& spec, std::span<const std::byte> bytes, std::uint8_t expected) {
  auto frame = decode_frame(spec, bytes);
  if (frame && frame->type != expected)
    return fail(Errc::ProtocolError, prefix(spec) + "message type " + std::to_string(frame->type) +
                                         " where " + std::to_string(expected) + " was expected");
  return frame;
}

PayloadWriter& PayloadWriter::put_bytes(std::span<const std::byte> bytes) noexcept {
  if (overflow_ || bytes.size() > out_.size() - used_) {
    overflow_ = true;
    return *this;
  }
  if (!bytes.empty()) std::memcpy(out_.data() + used_, bytes.data(), bytes.size());
  used_ += bytes.size();
  return *this;
}

PayloadReader& PayloadReader::get_bytes(std::span<std::byte> out) noexcept {
  if (underflow_ || out.size() > in_.size() - used_) {
    underflow_ = true;
    return *this;
  }
  if (!out.empty()) std::memcpy(out.data(), in_.data() + used_, out.size());
  used_ += out.size();
  return *this;
}

std::span<const std::byte> PayloadReader::rest() noexcept {
  auto tail = in_.subspan(used_);
  used_ = in_.size();
  return tail;
}

Result<void> PayloadReader::finish() const {
  if (underflow_)
    return fail(Errc::ProtocolError, prefix(*spec_) + "a payload of " + std::to_string(in_.size()) +
                                         " bytes, too short for its message's fields");
  if (used_ != in_.size())
    return fail(Errc::ProtocolError,
                prefix(*spec_) + std::to_string(in_.size() - used_) + " bytes past its message's fields");
  return {};
}

// ---- The channel ------------------------------------------------------------------------------------

MessageChannel::MessageChannel(Connection& connection, std::shared_ptr<Connection> owned,
                               const FrameSpec& spec, const ChannelOptions& options,
                               std::shared_ptr<MemoryRegion> region)
    : connection_(&connection),
      owned_(std::move(owned)),
      spec_(&spec),
      options_(options),
      region_(std::move(region)),
      extra_offset_((buffers() + options.sends) * spec.max_frame()),
      ids_(buffers()) {}

Result<MessageChannel> MessageChannel::open(Context& context, Connection& connection, const FrameSpec& spec,
                                            const ChannelOptions& options) {
  if (auto ok = check_spec(spec, options); !ok) return std::unexpected(ok.error());
  const std::size_t bytes = (options.receives + 1 + options.sends) * spec.max_frame() + options.extra;
  auto region = context.allocate(bytes, Access::LocalWrite);
  if (!region) return std::unexpected(region.error());
  return MessageChannel(connection, nullptr, spec, options, std::move(*region));
}

Result<MessageChannel> MessageChannel::open(Context& context, std::shared_ptr<Connection> connection,
                                            const FrameSpec& spec, const ChannelOptions& options) {
  auto channel = open(context, *connection, spec, options);
  if (channel) channel->owned_ = std::move(connection);
  return channel;
}

MessageChannel::MessageChannel(MessageChannel&& other) noexcept
    : connection_(std::exchange(other.connection_, nullptr)),
      owned_(std::move(other.owned_)),
      spec_(other.spec_),
      options_(other.options_),
      region_(std::move(other.region_)),
      extra_offset_(other.extra_offset_),
      posted_(other.posted_),
      taken_(other.taken_),
      ids_(std::move(other.ids_)),
      pending_sends_(std::move(other.pending_sends_)),
      sent_(other.sent_),
      failure_(std::move(other.failure_)),
      repost_failed_(other.repost_failed_),
      released_(other.released_) {}

MessageChannel::~MessageChannel() {
  if (connection_ && !released_) connection_->close();
}

Segment MessageChannel::receive_segment(std::uint64_t index) const noexcept {
  return region_->slice((index % buffers()) * spec_->max_frame(),
                        static_cast<std::uint32_t>(spec_->max_frame()));
}

Error MessageChannel::sticky(Error error) {
  if (!failure_) failure_ = std::move(error);
  return *failure_;
}

// A failed completion: a frame longer than the receive buffer (the peer's, or a stranger's), else the
// connection failed or was closed; a flushed receive only echoes the first failure, so that one is named.
Error MessageChannel::broken(const Completion& completion, std::string_view what) {
  if (completion.status == Status::LocalLength || completion.status == Status::RemoteInvalidRequest)
    return sticky(Error(Errc::ProtocolError, prefix(*spec_) + "a message larger than " +
                                                 std::to_string(spec_->max_frame()) + " bytes (" +
                                                 std::string(what) + " failed)"));
  std::string cause;
  if (auto health = connection_->health(); !health)
    cause = "; the connection failed first with " + health.error().describe();
  return sticky(Error(Errc::ConnectionBroken, prefix(*spec_) + std::string(what) + " failed (" +
                                                  std::string(to_string(completion.status)) +
                                                  "): the peer closed the connection or went away" + cause));
}

Result<void> MessageChannel::post_receive() {
  auto id = connection_->post_recv(receive_segment(posted_));
  if (!id) return fail(Errc::ConnectionBroken, prefix(*spec_) + "posting a receive: " + id.error().message());
  ids_[posted_ % buffers()] = *id;
  ++posted_;
  return {};
}

Result<void> MessageChannel::expect() {
  if (failure_) return std::unexpected(*failure_);
  if (posted() >= options_.receives)
    return fail(Errc::InvalidArgument, prefix(*spec_) + "more than " + std::to_string(options_.receives) +
                                           " receives posted at once");
  if (auto ok = post_receive(); !ok) return std::unexpected(sticky(ok.error()));
  return {};
}

Result<void> MessageChannel::expect(std::uint32_t count) {
  for (std::uint32_t i = 0; i < count; ++i)
    if (auto ok = expect(); !ok) return ok;
  return {};
}

Result<Completion> MessageChannel::wait_receive(std::chrono::nanoseconds timeout) {
  const std::uint64_t id = ids_[taken_ % buffers()];
  if (!options_.owns_recv_queue) return connection_->wait(id, timeout);
  Completion done;
  auto got = connection_->recv_cq().wait(std::span(&done, 1), timeout, WaitMode::Block);
  if (!got) return std::unexpected(got.error());
  if (*got == 0) return fail(Errc::Timeout, "no completion");
  if (done.id != id)
    return std::unexpected(
        sticky(Error(Errc::ProtocolError, prefix(*spec_) + "completion " + std::to_string(done.id) +
                                              " on a queue that is the channel's alone")));
  return done;
}

Result<Frame> MessageChannel::take(const Completion& completion) {
  const std::uint64_t index = taken_++;
  if (!completion.ok()) return std::unexpected(broken(completion, "a receive"));
  if (completion.opcode != Opcode::Recv)
    return std::unexpected(sticky(Error(
        Errc::ProtocolError, prefix(*spec_) + "the peer wrote with immediate where a message was expected")));
  auto bytes = std::span<const std::byte>(
      static_cast<const std::byte*>(region_->data()) + (index % buffers()) * spec_->max_frame(),
      std::min<std::size_t>(completion.bytes, spec_->max_frame()));
  if (completion.bytes > spec_->max_frame())  // a transport that delivered past the buffer: never trust it
    return std::unexpected(broken(Completion{.status = Status::LocalLength}, "a receive"));
  auto frame = decode_frame(*spec_, bytes);
  if (!frame) return std::unexpected(sticky(frame.error()));
  // The peer may hang up right after its last message: that message still counts, and the failed repost
  // is reported by the next receive instead.
  if (options_.keep_posted && !post_receive()) repost_failed_ = true;
  return frame;
}

Result<Frame> MessageChannel::receive(std::chrono::nanoseconds timeout) {
  if (failure_) return std::unexpected(*failure_);
  if (repost_failed_ && posted() == 0)
    return std::unexpected(sticky(Error(Errc::ConnectionBroken, prefix(*spec_) + "the peer has gone")));
  if (posted() == 0)
    if (auto ok = expect(); !ok) return std::unexpected(ok.error());
  auto done = wait_receive(timeout);
  if (!done && done.error().code() == Errc::Timeout)
    return fail(Errc::Timeout, prefix(*spec_) + "no message within " + milliseconds(timeout));
  if (!done)
    return std::unexpected(
        sticky(Error(done.error().code(), prefix(*spec_) + "receiving: " + done.error().message())));
  return take(*done);
}

Result<Frame> MessageChannel::receive(std::uint8_t expected, std::chrono::nanoseconds timeout) {
  auto frame = receive(timeout);
  if (frame && frame->type != expected)
    return std::unexpected(
        sticky(Error(Errc::ProtocolError, prefix(*spec_) + "message type " + std::to_string(frame->type) +
                                              " where " + std::to_string(expected) + " was expected")));
  return frame;
}

Result<std::optional<Frame>> MessageChannel::try_receive() {
  if (failure_) return std::unexpected(*failure_);
  if (posted() == 0) {
    if (repost_failed_)
      return std::unexpected(sticky(Error(Errc::ConnectionBroken, prefix(*spec_) + "the peer has gone")));
    return std::optional<Frame>{};
  }
  auto done = connection_->wait(ids_[taken_ % buffers()], std::chrono::nanoseconds::zero());
  if (!done && done.error().code() == Errc::Timeout) return std::optional<Frame>{};
  if (!done)
    return std::unexpected(
        sticky(Error(done.error().code(), prefix(*spec_) + "receiving: " + done.error().message())));
  auto frame = take(*done);
  if (!frame) return std::unexpected(frame.error());
  return std::optional<Frame>(*frame);
}

Result<void> MessageChannel::reap_send(std::chrono::nanoseconds timeout) {
  if (pending_sends_.empty()) return {};
  auto done = connection_->wait(pending_sends_.front(), timeout);
  if (!done && done.error().code() == Errc::Timeout)  // still in flight: the next post waits for it again
    return fail(Errc::Timeout, prefix(*spec_) + "a message not delivered within " + milliseconds(timeout));
  pending_sends_.pop_front();
  if (!done)
    return std::unexpected(
        sticky(Error(done.error().code(), prefix(*spec_) + "sending: " + done.error().message())));
  if (!done->ok()) return std::unexpected(broken(*done, "a send"));
  return {};
}

Result<void> MessageChannel::reap_sends(std::chrono::nanoseconds timeout) {
  while (!pending_sends_.empty())
    if (auto ok = reap_send(timeout); !ok) return ok;
  return {};
}

Result<void> MessageChannel::post(std::uint8_t type, std::span<const std::byte> payload) {
  if (failure_) return std::unexpected(*failure_);
  if (pending_sends_.size() >= options_.sends)
    if (auto ok = reap_send(options_.send_timeout); !ok) return ok;
  const std::size_t offset = sends_offset() + (sent_ % options_.sends) * spec_->max_frame();
  auto out = std::span(static_cast<std::byte*>(region_->data()) + offset, spec_->max_frame());
  auto size = encode_frame(*spec_, type, payload, out);
  if (!size) return std::unexpected(size.error());
  auto id = connection_->send(region_->slice(offset, static_cast<std::uint32_t>(*size)));
  if (!id)
    return std::unexpected(
        sticky(Error(Errc::ConnectionBroken, prefix(*spec_) + "sending: " + id.error().message())));
  pending_sends_.push_back(*id);
  ++sent_;
  return {};
}

Result<void> MessageChannel::send(std::uint8_t type, std::span<const std::byte> payload,
                                  std::chrono::nanoseconds timeout) {
  if (auto ok = post(type, payload); !ok) return ok;
  return reap_sends(timeout);
}

Result<void> MessageChannel::send(std::uint8_t type, std::span<const std::byte> payload) {
  return send(type, payload, options_.send_timeout);
}

Result<void> MessageChannel::release() {
  if (posted() > 0)
    return fail(Errc::InvalidArgument, prefix(*spec_) + std::to_string(posted()) + " receives still posted");
  if (auto ok = reap_sends(options_.send_timeout); !ok) return ok;
  released_ = true;
  return {};
}

}  // namespace rdmakit::detail
