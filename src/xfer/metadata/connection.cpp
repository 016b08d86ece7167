#include "xfer/metadata/connection.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/net.hpp"

namespace rdmakit::xfer::metadata {

std::chrono::milliseconds left(Deadline deadline) {
  auto now = Clock::now();
  if (now >= deadline) return std::chrono::milliseconds(0);
  // Rounded up, so that a wait never ends before the deadline and spins.
  return std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

// Resolution and the bounded connect are the library's one address helper (core/net.hpp), as for the
// bootstrap store: IPv4, a silent server a Timeout at `deadline`, nobody listening ConnectionRefused.
Result<Socket> Socket::connect(const std::string& host, std::uint16_t port, Deadline deadline,
                               const std::string& where) {
  auto prefixed = [&where](const Error& error) {
    return std::unexpected(Error(error.code(), where + ": " + error.message(), error.sys_errno()));
  };
  auto address = net::resolve(host, port, AF_INET);
  if (!address) return prefixed(address.error());
  auto fd = net::connect(*address, deadline);
  if (!fd) return prefixed(fd.error());
  int one = 1;
  setsockopt(fd->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return Socket(std::move(*fd), where);
}

Result<void> Socket::wait(short events, Deadline deadline, std::string_view doing) {
  for (;;) {
    auto ms = left(deadline);
    if (ms.count() == 0)
      return fail(Errc::Timeout, where_ + ": timed out waiting to " + std::string(doing) +
                                     " (the metadata timeout ran out; is the server alive?)");
    pollfd p{fd_.get(), events, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::min<long>(ms.count(), 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return fail_errno(where_ + ": poll", errno);
    if (ready > 0) return {};
  }
}

Result<void> Socket::send_all(std::string_view data, Deadline deadline) {
  while (!data.empty()) {
    ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (auto ok = wait(POLLOUT, deadline, "send"); !ok) return ok;
      continue;
    }
    if (n <= 0) return fail(Errc::ConnectionBroken, where_ + ": send failed: " + std::strerror(errno));
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Result<void> Socket::receive_some(std::string& buffer, Deadline deadline) {
  char chunk[16384];
  for (;;) {
    ssize_t n = ::recv(fd_.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
      return {};
    }
    if (n == 0) return fail(Errc::ConnectionBroken, where_ + ": the server closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return fail(Errc::ConnectionBroken, where_ + ": receive failed: " + std::strerror(errno));
    if (auto ok = wait(POLLIN, deadline, "receive a reply"); !ok) return ok;
  }
}

Result<void> Connection::ensure_open(Deadline deadline) {
  if (socket_) return {};
  auto socket = Socket::connect(host_, port_, deadline, where_);
  if (!socket) return std::unexpected(socket.error());
  socket_.emplace(std::move(*socket));
  buffer_.clear();
  if (greet_) {
    if (auto ok = greet_(*this, deadline); !ok) {
      close();
      return ok;
    }
  }
  return {};
}

}  // namespace rdmakit::xfer::metadata
