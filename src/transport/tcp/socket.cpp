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
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
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

std::string format_address(const sockaddr_storage& address, socklen_t length) {
  net::Address a;
  std::memcpy(&a.storage, &address, sizeof(a.storage));
  a.length = length;
  return net::to_string(a);
}

constexpr std::string_view kLoopback = "127.0.0.1";

}  // namespace

Result<Fd> listen_on(std::string_view address) {
  auto resolved = net::resolve(address, kLoopback, AF_UNSPEC, true);
  if (!resolved) return std::unexpected(resolved.error());
  Fd fd(::socket(resolved->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), resolved->get(), resolved->length) != 0)
    return fail_errno("bind " + std::string(address), errno);
  if (::listen(fd.get(), 1024) != 0) return fail_errno("listen " + std::string(address), errno);
  return fd;
}

Result<std::string> local_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    return fail_errno("getsockname", errno);
  return format_address(address, length);
}

Result<std::string> peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    return fail_errno("getpeername", errno);
  return format_address(address, length);
}

Result<Fd> connect_to(std::string_view address, Deadline deadline) {
  auto resolved = net::resolve(address, kLoopback);
  if (!resolved) return std::unexpected(resolved.error());
  auto fd = net::connect(*resolved, deadline);
  if (!fd && fd.error().code() == Errc::ConnectionRefused)
    return fail(Errc::ConnectionRefused, "nobody listens at " + std::string(address));
  return fd;
}

Result<PeerInfo> handshake(int fd, const PeerInfo& self, Deadline deadline) {
  Hello mine = encode_hello(self);
  if (auto ok = transfer_all(fd, &mine, sizeof(mine), true, deadline); !ok)
    return std::unexpected(ok.error());
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
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    return fail_errno("TCP_NODELAY", errno);
  return {};
}

}  // namespace rdmakit::tcp
