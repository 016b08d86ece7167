#include "xfer/metadata/connection.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace rdmakit::xfer::metadata {

std::chrono::milliseconds left(Deadline deadline) {
  auto now = Clock::now();
  if (now >= deadline) return std::chrono::milliseconds(0);
  // Rounded up, so that a wait never ends before the deadline and spins.
  return std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

Result<Socket> Socket::connect(const std::string& host, std::uint16_t port, Deadline deadline,
                               const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr)
    return fail(Errc::InvalidArgument, where + ": cannot resolve '" + host + "': " + gai_strerror(rc));
  sockaddr_in address{};
  std::memcpy(&address, found->ai_addr, sizeof(address));
  freeaddrinfo(found);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail_errno(where + ": socket", errno);
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Socket socket(std::move(fd), where);
  if (::connect(socket.fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno != EINPROGRESS)
      return std::unexpected(Error(errno == ECONNREFUSED ? Errc::ConnectionRefused : Errc::SystemError,
                                   where + ": cannot connect: " + std::strerror(errno), errno));
    if (auto ok = socket.wait(POLLOUT, deadline, "connect"); !ok) return std::unexpected(ok.error());
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(socket.fd_.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0)
      return std::unexpected(Error(error == ECONNREFUSED ? Errc::ConnectionRefused : Errc::SystemError,
                                   where + ": cannot connect: " + std::strerror(error), error));
  }
  return socket;
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
