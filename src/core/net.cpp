#include "core/net.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace rdmakit::net {

Result<HostPort> parse_host_port(std::string_view text) {
  std::string_view host, port;
  if (text.starts_with('[')) {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return fail(Errc::InvalidArgument, "address '" + std::string(text) + "': expected [ipv6]:port");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  } else {
    port = text;
  }
  std::uint16_t number = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size())
    return fail(Errc::InvalidArgument, "address '" + std::string(text) + "': port must be a number 0..65535");
  return HostPort{std::string(host), number};
}

Result<Address> resolve(const std::string& host, std::uint16_t port, int family, bool passive) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr)
    return fail(Errc::InvalidArgument, "cannot resolve '" + host + "': " + gai_strerror(rc));
  Address address;
  address.length = static_cast<socklen_t>(std::min<std::size_t>(found->ai_addrlen, sizeof(address.storage)));
  std::memcpy(&address.storage, found->ai_addr, address.length);
  freeaddrinfo(found);
  return address;
}

Result<Address> resolve(std::string_view text, std::string_view default_host, int family, bool passive) {
  auto parsed = parse_host_port(text);
  if (!parsed) return std::unexpected(parsed.error());
  return resolve(parsed->host.empty() ? std::string(default_host) : parsed->host, parsed->port, family,
                 passive);
}

namespace {

int milliseconds_left(Deadline deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

}  // namespace

Result<Fd> connect(const Address& address, Deadline deadline) {
  std::string where = to_string(address);
  Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail_errno("socket", errno);
  int error = 0;
  if (::connect(fd.get(), address.get(), address.length) != 0) {
    if (errno != EINPROGRESS) {
      error = errno;
    } else {
      for (;;) {
        pollfd p{fd.get(), POLLOUT, 0};
        int n = ::poll(&p, 1, milliseconds_left(deadline));
        if (n > 0) break;
        if (n == 0) return fail(Errc::Timeout, "connect to " + where + " timed out");
        if (errno != EINTR) return fail_errno("connect to " + where + ": poll", errno);
      }
      socklen_t length = sizeof(error);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    }
  }
  if (error == ECONNREFUSED) return fail(Errc::ConnectionRefused, "nobody listens at " + where);
  if (error != 0) return fail_errno("connect to " + where, error);
  return fd;
}

std::string to_string(const Address& address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.family() == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(address.storage);
    inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof(host));
    // Appended piece by piece: g++ 12 at -O3 reports a false -Wrestrict on "[" + std::string(...) (GCC PR
    // 105651), which -Werror turned into a failed Release build.
    std::string text = "[";
    text += host;
    text += "]:";
    text += std::to_string(ntohs(a.sin6_port));
    return text;
  }
  const auto& a = reinterpret_cast<const sockaddr_in&>(address.storage);
  inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace rdmakit::net
