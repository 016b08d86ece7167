// The one message channel of the library: small control messages carried by SEND/RECV over an rdmakit
// Connection, for every protocol that talks before or beside the data (bootstrap's peer proof, the
// collectives' handshake, the checkpoint replica, rdmakit-perf's control). Each protocol keeps its own
// message types and fields; the framing, the buffers and the checks are written once, here.
//
// Framing (the codec, pure and fuzzed): an 8-byte header, then `length` bytes of payload:
//   magic[4]  version[1]  type[1]  length[2]        (host byte order: every supported host is little-endian)
// A frame is checked against its protocol's FrameSpec: the magic, the version (Errc::NotSupported names
// both versions), a type in 1..max_type, a length within max_payload that matches the bytes received.
//
// The channel bounds what a peer can cost, which matters before anything is trusted (the peer proof runs
// on connections from strangers): its memory is fixed when it opens (receive buffers of the spec's largest
// frame, one send buffer), a frame larger than a receive buffer fails that receive, and every wait has a
// deadline. Malformed, oversized, unexpected, late, or a peer gone: a Result error naming the protocol,
// never a crash or a hang. A decode error or a broken connection is sticky; a timeout is not.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::detail {

inline constexpr std::size_t kFrameHeader = 8;
// The ceiling on any protocol's payload: a frame fits in one 4 KiB page with its header.
inline constexpr std::size_t kMaxFramePayload = 4096 - kFrameHeader;

struct FrameSpec {
  std::string_view name;  // the protocol, as errors name it ("peer proof", "ckpt replica")
  std::uint32_t magic = 0;
  std::uint8_t version = 0;
  std::uint8_t max_type = 0;      // types 1..max_type; 0 is never a type
  std::uint16_t max_payload = 0;  // at most kMaxFramePayload
  std::size_t max_frame() const noexcept { return kFrameHeader + max_payload; }
};

struct Frame {
  std::uint8_t type = 0;
  std::span<const std::byte> payload;  // inside the bytes that were decoded
};

// Header and payload into `out`; the size written. InvalidArgument for a type or payload the spec does not
// allow, or an `out` too small: a local bug, never sent.
Result<std::size_t> encode_frame(const FrameSpec& spec, std::uint8_t type, std::span<const std::byte> payload,
                                 std::span<std::byte> out);
// A peer's bytes as a frame of `spec` (ProtocolError, or NotSupported for another version).
Result<Frame> decode_frame(const FrameSpec& spec, std::span<const std::byte> bytes);
// The same, and the frame must be of type `expected` (ProtocolError naming both types).
Result<Frame> decode_frame(const FrameSpec& spec, std::span<const std::byte> bytes, std::uint8_t expected);

// Fixed-layout fields in and out of a payload, bounds-checked: a writer that runs out of room and a reader
// that runs out of bytes (or finish()es with bytes left) turn into errors instead of overruns.
class PayloadWriter {
 public:
  explicit PayloadWriter(std::span<std::byte> out) noexcept : out_(out) {}
  template <typename T>
    requires std::is_trivially_copyable_v<T>
  PayloadWriter& put(const T& value) noexcept {
    return put_bytes(std::as_bytes(std::span(&value, 1)));
  }
  PayloadWriter& put_bytes(std::span<const std::byte> bytes) noexcept;
  PayloadWriter& put_text(std::string_view text) noexcept {
    return put_bytes(std::as_bytes(std::span(text)));
  }
  bool ok() const noexcept { return !overflow_; }
  std::span<const std::byte> written() const noexcept { return out_.first(used_); }

 private:
  std::span<std::byte> out_;
  std::size_t used_ = 0;
  bool overflow_ = false;
};

class PayloadReader {
 public:
  PayloadReader(const FrameSpec& spec, std::span<const std::byte> in) noexcept : spec_(&spec), in_(in) {}
  template <typename T>
    requires std::is_trivially_copyable_v<T>
  PayloadReader& get(T& value) noexcept {
    return get_bytes(std::as_writable_bytes(std::span(&value, 1)));
  }
  PayloadReader& get_bytes(std::span<std::byte> out) noexcept;
  // Everything not read yet (a variable-length tail, bounded by the spec's max_payload).
  std::span<const std::byte> rest() noexcept;
  // ProtocolError when a field ran past the payload or bytes are left over.
  Result<void> finish() const;

 private:
  const FrameSpec* spec_;
  std::span<const std::byte> in_;
  std::size_t used_ = 0;
  bool underflow_ = false;
};

// One deadline across a protocol's steps: a handshake's messages share one timeout.
class Deadline {
 public:
  explicit Deadline(std::chrono::nanoseconds timeout) : at_(std::chrono::steady_clock::now() + timeout) {}
  std::chrono::nanoseconds left() const {
    return std::max<std::chrono::nanoseconds>(at_ - std::chrono::steady_clock::now(),
                                              std::chrono::nanoseconds::zero());
  }

 private:
  std::chrono::steady_clock::time_point at_;
};

struct ChannelOptions {
  std::uint32_t receives = 1;  // receives that may be posted at once
  std::size_t extra = 0;       // bytes after the channel's buffers, the caller's (extra_offset())
  // A receive is reposted as each message is taken, so the peer never meets an empty queue.
  bool keep_posted = false;
  // The connection's receive queue carries only this channel's receives: receive() sleeps in it
  // (WaitMode::Block) whatever the queue's own wait mode, leaving the CPU to whoever runs beside.
  bool owns_recv_queue = false;
  std::chrono::milliseconds send_timeout{30000};  // for a send's completion
  // Sends that may be in flight at once (each has its buffer): post() waits for the oldest only when all
  // are. One for a request-reply protocol; a server answering a window of requests takes the window, so
  // its answers are not spaced by the peer's acknowledgements.
  std::uint32_t sends = 1;
};

class MessageChannel {
 public:
  // Allocates the buffers (LocalWrite only: nothing of a channel is the peer's to read or write). With the
  // shared_ptr overload the channel keeps the connection alive; with the reference the caller does.
  static Result<MessageChannel> open(Context& context, std::shared_ptr<Connection> connection,
                                     const FrameSpec& spec, const ChannelOptions& options = {});
  static Result<MessageChannel> open(Context& context, Connection& connection, const FrameSpec& spec,
                                     const ChannelOptions& options = {});
  // Closes the connection unless release() succeeded: a receive still posted must not outlive its buffer,
  // and a protocol that stopped half-way leaves the peer nothing to talk to.
  ~MessageChannel();
  MessageChannel(MessageChannel&& other) noexcept;
  MessageChannel& operator=(MessageChannel&&) = delete;
  MessageChannel(const MessageChannel&) = delete;
  MessageChannel& operator=(const MessageChannel&) = delete;

  // Posts one more receive (at most options.receives at once): call before the peer may send.
  Result<void> expect();
  // Posts `count` more receives: a protocol whose peer sends several messages before we take one.
  Result<void> expect(std::uint32_t count);
  std::uint32_t posted() const noexcept { return static_cast<std::uint32_t>(posted_ - taken_); }

  // The next message, oldest receive first (one is posted if none is). Its payload stays valid until the
  // next message is taken. Errc::Timeout leaves the receive posted.
  Result<Frame> receive(std::chrono::nanoseconds timeout);
  Result<Frame> receive(std::uint8_t expected, std::chrono::nanoseconds timeout);
  // The next message if it has arrived, without waiting; nullopt when none has (or none is posted).
  Result<std::optional<Frame>> try_receive();

  // Sends one message and waits for its completion (options.send_timeout, or `timeout`).
  Result<void> send(std::uint8_t type, std::span<const std::byte> payload);
  Result<void> send(std::uint8_t type, std::span<const std::byte> payload, std::chrono::nanoseconds timeout);
  // Posts it and returns; when options.sends posts are in flight, the oldest one's completion is reaped
  // first (waiting up to send_timeout).
  Result<void> post(std::uint8_t type, std::span<const std::byte> payload);

  // The protocol is done and every receive completed: the connection stays open when the channel goes.
  // InvalidArgument while a receive is still posted (the channel then still closes it).
  Result<void> release();

  Connection& connection() const noexcept { return *connection_; }
  const FrameSpec& spec() const noexcept { return *spec_; }
  // The caller's options.extra bytes, at extra_offset() in region().
  MemoryRegion& region() const noexcept { return *region_; }
  std::size_t extra_offset() const noexcept { return extra_offset_; }

 private:
  MessageChannel(Connection& connection, std::shared_ptr<Connection> owned, const FrameSpec& spec,
                 const ChannelOptions& options, std::shared_ptr<MemoryRegion> region);
  std::size_t buffers() const noexcept { return options_.receives + 1; }
  Segment receive_segment(std::uint64_t index) const noexcept;
  Result<void> post_receive();
  Result<Completion> wait_receive(std::chrono::nanoseconds timeout);
  Result<Frame> take(const Completion& completion);
  // The oldest send in flight, if any, completed within `timeout`.
  Result<void> reap_send(std::chrono::nanoseconds timeout);
  Result<void> reap_sends(std::chrono::nanoseconds timeout);  // every one
  std::size_t sends_offset() const noexcept { return buffers() * spec_->max_frame(); }
  Error sticky(Error error);
  Error broken(const Completion& completion, std::string_view what);

  Connection* connection_;
  std::shared_ptr<Connection> owned_;
  const FrameSpec* spec_;
  ChannelOptions options_;
  std::shared_ptr<MemoryRegion> region_;  // receives+1 receive buffers, `sends` send buffers, then extra
  std::size_t extra_offset_ = 0;
  // Receives numbered in posting order; receive k lands in buffer k % buffers(). With one buffer more than
  // may be posted, reposting after taking message k never reuses the buffer message k is read from.
  std::uint64_t posted_ = 0, taken_ = 0;
  std::vector<std::uint64_t> ids_;  // receive k's id at k % buffers()
  // Sends in flight, oldest first (they complete in post order); send k used buffer k % options_.sends.
  std::deque<std::uint64_t> pending_sends_;
  std::uint64_t sent_ = 0;
  std::optional<Error> failure_;
  bool repost_failed_ = false;
  bool released_ = false;
};

}  // namespace rdmakit::detail
