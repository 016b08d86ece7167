// The one socket-address helper of the library: parse "host:port", resolve it, connect with a deadline,
// print an address. Used by the tcp transport, the verbs transport's connection manager, the bootstrap
// store and the collectives, so that every layer accepts the same address forms and fails the same way.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/fd.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::net {

using Deadline = std::chrono::steady_clock::time_point;

struct HostPort {
  std::string host;  // empty when the text gave none (":port" or "port")
  std::uint16_t port = 0;
};
// "host:port", "[v6]:port", ":port" or "port". Port 0 is allowed (any free port, when listening).
Result<HostPort> parse_host_port(std::string_view text);

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const noexcept { return storage.ss_family; }
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
};
// The first address of `host` (numeric or a name) in `family` (AF_UNSPEC: IPv4 or IPv6) with `port`.
// `passive` with an empty host: the wildcard address, for binding.
Result<Address> resolve(const std::string& host, std::uint16_t port, int family = AF_UNSPEC,
                        bool passive = false);
// parse_host_port() then resolve(); an empty host is `default_host`.
Result<Address> resolve(std::string_view text, std::string_view default_host, int family = AF_UNSPEC,
                        bool passive = false);

// A non-blocking TCP connect that gives up at `deadline` (Errc::Timeout); nobody listening is
// Errc::ConnectionRefused. The socket returned is non-blocking and close-on-exec.
Result<Fd> connect(const Address& address, Deadline deadline);

// "1.2.3.4:5" or "[::1]:5".
std::string to_string(const Address& address);

}  // namespace rdmakit::net
