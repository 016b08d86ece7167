// One TCP connection to a metadata server, every call bounded by a deadline (a dead or silent server is a
// Timeout naming its URL, never a hang), reconnected on the next call after any failure.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/fd.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::xfer::metadata {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

class Socket {
 public:
  // Connects to host:port (IPv4) by `deadline`; errors start with `where` (the store's URL).
  static Result<Socket> connect(const std::string& host, std::uint16_t port, Deadline deadline,
                                const std::string& where);
  Result<void> send_all(std::string_view data, Deadline deadline);
  // Appends at least one received byte to `buffer`; ConnectionBroken when the server closed.
  Result<void> receive_some(std::string& buffer, Deadline deadline);

 private:
  Socket(Fd fd, std::string where) : fd_(std::move(fd)), where_(std::move(where)) {}
  // Waits for `events` on the socket until `deadline`.
  Result<void> wait(short events, Deadline deadline, std::string_view doing);

  Fd fd_;
  std::string where_;
};

// A decoder of replies at the front of a receive buffer: the value, nullopt while incomplete, or an error
// (malformed bytes). It sets `consumed` to the bytes the value took.
template <typename T>
using ReplyParser = std::function<Result<std::optional<T>>(std::string_view buffer, std::size_t& consumed)>;

class Connection {
 public:
  // `greet` runs on every new connection before its first request (the builtin store's handshake).
  using Greeting = std::function<Result<void>(Connection&, Deadline)>;
  Connection(std::string host, std::uint16_t port, std::string where, Greeting greet = {})
      : host_(std::move(host)), port_(port), where_(std::move(where)), greet_(std::move(greet)) {}

  const std::string& where() const noexcept { return where_; }
  const std::string& host() const noexcept { return host_; }
  std::uint16_t port() const noexcept { return port_; }

  // Sends `request` and reads one reply; any failure closes the connection (the next call reconnects).
  template <typename T>
  Result<T> exchange(std::string_view request, Deadline deadline, const ReplyParser<T>& parse) {
    auto result = exchange_once(request, deadline, parse);
    if (!result) close();
    return result;
  }
  void close() noexcept {
    socket_.reset();
    buffer_.clear();
  }

 private:
  Result<void> ensure_open(Deadline deadline);

  template <typename T>
  Result<T> exchange_once(std::string_view request, Deadline deadline, const ReplyParser<T>& parse) {
    if (auto ok = ensure_open(deadline); !ok) return std::unexpected(ok.error());
    if (auto ok = socket_->send_all(request, deadline); !ok) return std::unexpected(ok.error());
    for (;;) {
      std::size_t consumed = 0;
      auto parsed = parse(buffer_, consumed);
      if (!parsed)
        return std::unexpected(Error(parsed.error().code(), where_ + ": " + parsed.error().message()));
      if (*parsed) {
        buffer_.erase(0, consumed);
        return std::move(**parsed);
      }
      if (auto ok = socket_->receive_some(buffer_, deadline); !ok) return std::unexpected(ok.error());
    }
  }

  std::string host_;
  std::uint16_t port_;
  std::string where_;
  Greeting greet_;
  std::optional<Socket> socket_;
  std::string buffer_;  // received bytes not yet decoded
};

// Milliseconds left until `deadline` (0 when past).
std::chrono::milliseconds left(Deadline deadline);

}  // namespace rdmakit::xfer::metadata
