// One replica connection's control messages: a small registered buffer, a SEND per message and a
// receive posted ahead of each one expected (src/ckpt/replica.hpp has the protocol).
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "ckpt/replica.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::ckpt::detail {

class Channel {
 public:
  // `extra` bytes after the two message buffers, at offset kExtraOffset (the client's manifest area). Local
  // access only: nothing of a channel is the peer's to read or write.
  static constexpr std::size_t kExtraOffset = 4096;
  static Result<Channel> create(Context& context, std::shared_ptr<Connection> connection, std::size_t extra);

  // Posts the receive for the next message; call before the peer may send it.
  Result<void> expect();
  // Waits for the message expect() made room for. Timeout (Errc::Timeout) leaves it posted.
  Result<Message> receive(std::chrono::milliseconds timeout);
  // The message expect() made room for if it arrived, without waiting (the server's progress loop).
  std::optional<Result<Message>> try_receive();
  Result<void> send(const Message& message);
  // Posts the SEND and returns; the previous one's completion is reaped first (waiting up to a second: a
  // peer asks again only after it got the previous reply, so it has long completed).
  Result<void> send_nowait(const Message& message);
  // send() then receive() of the reply, with the receive posted first.
  Result<Message> call(const Message& message, std::chrono::milliseconds timeout);

  Connection& connection() const { return *connection_; }
  MemoryRegion& region() const { return *region_; }

 private:
  Channel(std::shared_ptr<Connection> connection, std::shared_ptr<MemoryRegion> region)
      : connection_(std::move(connection)), region_(std::move(region)) {}
  std::shared_ptr<Connection> connection_;
  std::shared_ptr<MemoryRegion> region_;
  std::uint64_t pending_recv_ = 0;
  bool recv_posted_ = false;
  std::uint64_t pending_send_ = 0;
  bool send_posted_ = false;
};

// Moves [offset, offset + size) between a local region and a remote one in pieces of at most `piece`
// bytes, a window of them in flight (each window's last one signaled and waited for).
Result<void> transfer(Connection& connection, bool write, const MemoryRegion& local,
                      std::uint64_t local_offset, RemoteAddress remote, std::uint64_t size,
                      std::uint64_t piece);

}  // namespace rdmakit::ckpt::detail
