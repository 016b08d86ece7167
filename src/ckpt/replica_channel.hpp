// One replica connection's control messages over the one message channel, and the one-sided moves of
// its data (src/ckpt/replica.hpp has the protocol).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "ckpt/replica.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::ckpt::detail {

// The replica protocol over the one message channel (core/message_channel.hpp): one receive posted at a
// time and reposted as each message is taken, one send buffer, and the client's manifest area after them.
class Channel {
 public:
  // `extra` bytes for the caller at extra_offset() in region(). Local access only: nothing of a channel is
  // the peer's to read or write. `send_timeout` bounds the wait for a send's completion (the server's
  // progress loop serves every connection, so it waits briefly).
  static Result<Channel> create(Context& context, std::shared_ptr<Connection> connection, std::size_t extra,
                                std::chrono::milliseconds send_timeout = std::chrono::seconds(60));

  // Posts the receive for the next message unless one is posted; call before the peer may send it.
  Result<void> expect();
  // Waits for the message expect() made room for. Timeout (Errc::Timeout) leaves it posted.
  Result<Message> receive(std::chrono::milliseconds timeout);
  // The message expect() made room for if it arrived, without waiting (the server's progress loop).
  std::optional<Result<Message>> try_receive();
  Result<void> send(const Message& message);
  // Posts the SEND and returns; the previous one's completion is reaped first (a peer asks again only
  // after it got the previous reply, so it has long completed).
  Result<void> send_nowait(const Message& message);
  // send() then receive() of the reply, with the receive posted first.
  Result<Message> call(const Message& message, std::chrono::milliseconds timeout);

  Connection& connection() const { return channel_.connection(); }
  MemoryRegion& region() const { return channel_.region(); }
  std::size_t extra_offset() const { return channel_.extra_offset(); }

 private:
  explicit Channel(rdmakit::detail::MessageChannel channel) : channel_(std::move(channel)) {}
  rdmakit::detail::MessageChannel channel_;
};

// Called as the pieces complete, in order, with the bytes from the start that are now placed.
using Placed = std::function<Result<void>(std::uint64_t bytes)>;
Result<void> transfer(Connection& connection, bool write, const MemoryRegion& local,
                      std::uint64_t local_offset, RemoteAddress remote, std::uint64_t size,
                      std::uint64_t piece, const Placed& placed = {});
// (Moves [offset, offset + size) between a local region and a remote one in pieces of at most `piece`
// bytes, a sliding window of them in flight, every fourth signaled.)

}  // namespace rdmakit::ckpt::detail
