#include "transport/tcp/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "transport/tcp/wire.hpp"

namespace rdmakit::tcp {
namespace {

int milliseconds_left(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

// Waits for `events` on fd; Timeout when the deadline passes first.
Result<void> wait_for(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, milliseconds_left(deadline));
    if (n > 0) return {};
    if (n == 0) return fail(Errc::Timeout, std::string(what) + " timed out");
    if (errno != EINTR) return fail_errno(what, errno);
  }
}

Result<void> transfer_all(int fd, void* data, std::size_t size, bool sending, Deadline deadline) {
  auto* bytes = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = sending ? ::send(fd, bytes + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : ::recv(fd, bytes + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return fail(Errc::ConnectionRefused, "peer closed the connection during the handshake");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return fail_errno("handshake", errno);
    if (auto ok = wait_for(fd, sending ? POLLOUT : POLLIN, deadline, "handshake"); !ok) return ok;
  }
  return {};
}

std::string format_address(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(address);
    inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(a.sin6_port));
  }
  const auto& a = reinterpret_cast<const sockaddr_in&>(address);
  inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(a.sin_port));
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfo = std::unique_ptr<addrinfo, AddrInfoDeleter>;

Result<AddrInfo> resolve(std::string_view address, bool passive) {
  auto parsed = parse_address(address);
  if (!parsed) return std::unexpected(parsed.error());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* info = nullptr;
  if (int rc = getaddrinfo(parsed->host.c_str(), parsed->port.c_str(), &hints, &info); rc != 0)
    return fail(Errc::InvalidArgument, "cannot resolve '" + std::string(address) + "': " + gai_strerror(rc));
  return AddrInfo(info);
}

}  // namespace

Result<HostPort> parse_address(std::string_view address) {
  std::string_view host, port;
  if (address.starts_with('[')) {
    auto close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return fail(Errc::InvalidArgument, "address '" + std::string(address) + "': expected [ipv6]:port");
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else if (auto colon = address.rfind(':'); colon != std::string_view::npos) {
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  } else {
    port = address;
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(std::string(port)) > 65535)
    return fail(Errc::InvalidArgument, "address '" + std::string(address) + "': port must be a number 0..65535");
  return HostPort{host.empty() ? "127.0.0.1" : std::string(host), std::string(port)};
}

Result<Fd> listen_on(std::string_view address) {
  auto info = resolve(address, true);
  if (!info) return std::unexpected(info.error());
  const addrinfo* ai = info->get();
  Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) return fail_errno("bind " + std::string(address), errno);
  if (::listen(fd.get(), 1024) != 0) return fail_errno("listen " + std::string(address), errno);
  return fd;
}

Result<std::string> local_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return fail_errno("getsockname", errno);
  return format_address(address);
}

Result<std::string> peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return fail_errno("getpeername", errno);
  return format_address(address);
}

Result<Fd> connect_to(std::string_view address, Deadline deadline) {
  auto info = resolve(address, false);
  if (!info) return std::unexpected(info.error());
  const addrinfo* ai = info->get();
  Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail_errno("socket", errno);
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      if (errno == ECONNREFUSED) return fail(Errc::ConnectionRefused, "nobody listens at " + std::string(address));
      return fail_errno("connect to " + std::string(address), errno);
    }
    if (auto ok = wait_for(fd.get(), POLLOUT, deadline, "connect"); !ok) return std::unexpected(ok.error());
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error == ECONNREFUSED) return fail(Errc::ConnectionRefused, "nobody listens at " + std::string(address));
    if (error != 0) return fail_errno("connect to " + std::string(address), error);
  }
  return fd;
}

Result<PeerInfo> handshake(int fd, const PeerInfo& self, Deadline deadline) {
  Hello mine = encode_hello(self);
  if (auto ok = transfer_all(fd, &mine, sizeof(mine), true, deadline); !ok) return std::unexpected(ok.error());
  std::array<std::byte, sizeof(Hello)> theirs;
  if (auto ok = transfer_all(fd, theirs.data(), theirs.size(), false, deadline); !ok)
    return std::unexpected(ok.error());
  auto peer = decode_hello(theirs);
  if (!peer) return std::unexpected(peer.error());
  if (auto address = peer_address(fd)) peer->address = *address;
  return peer;
}

Result<void> make_data_socket(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return fail_errno("fcntl O_NONBLOCK", errno);
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) return fail_errno("TCP_NODELAY", errno);
  return {};
}

}  // namespace rdmakit::tcp
