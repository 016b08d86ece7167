#include "transport/shm/socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace rdmakit::shm {
namespace {

constexpr std::size_t kMaxFds = 8;

Result<socklen_t> make_address(const std::string& name, sockaddr_un& address) {
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  if (name.empty() || name.size() >= sizeof(address.sun_path) - 1)
    return fail(Errc::InvalidArgument, "shm address '" + name + "': the name must have 1 to " +
                                           std::to_string(sizeof(address.sun_path) - 2) + " characters");
  bool abstract = name.front() != '/';
  // Abstract names start with a NUL byte and are not NUL-terminated; their length is the address length.
  std::memcpy(address.sun_path + (abstract ? 1 : 0), name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
}

Result<void> wait_readable(int fd, Deadline deadline, const char* what) {
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) return fail(Errc::Timeout, std::string("shm: ") + what + " timed out");
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (n > 0) return {};
    if (n < 0 && errno != EINTR) return fail_errno(std::string("shm: poll while ") + what, errno);
  }
}

}  // namespace

Result<std::string> parse_address(std::string_view address) {
  if (!address.starts_with("shm:"))
    return fail(Errc::InvalidArgument,
                "shm address '" + std::string(address) + "': expected shm:<name> or shm:/path/to/socket");
  return std::string(address.substr(4));
}

Result<UniqueFd> listen_unix(const std::string& name) {
  sockaddr_un address;
  auto length = make_address(name, address);
  if (!length) return std::unexpected(length.error());
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("shm: socket", errno);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), *length) != 0)
    return fail_errno("shm: bind to shm:" + name, errno);
  if (::listen(fd.get(), 128) != 0) return fail_errno("shm: listen on shm:" + name, errno);
  return fd;
}

Result<UniqueFd> connect_unix(const std::string& name) {
  sockaddr_un address;
  auto length = make_address(name, address);
  if (!length) return std::unexpected(length.error());
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("shm: socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), *length) != 0) {
    int err = errno;
    if (err == ECONNREFUSED || err == ENOENT)
      return fail(Errc::ConnectionRefused, "shm: nobody listens on shm:" + name);
    return fail_errno("shm: connect to shm:" + name, err);
  }
  return fd;
}

Result<UniqueFd> accept_unix(int listener, Deadline deadline) {
  for (;;) {
    if (auto ready = wait_readable(listener, deadline, "accept"); !ready)
      return std::unexpected(ready.error());
    UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (fd) return fd;
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return fail_errno("shm: accept", errno);
  }
}

Result<void> send_message(int socket, std::span<const std::byte> bytes, std::span<const int> fds) {
  if (fds.size() > kMaxFds) return fail(Errc::InvalidArgument, "shm: too many descriptors in one message");
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&msg);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t sent;
  do sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent < 0) return fail_errno("shm: sending the handshake", errno);
  return {};
}

Result<void> receive_message(int socket, std::span<std::byte> bytes, std::vector<UniqueFd>& fds,
                             Deadline deadline) {
  if (auto ready = wait_readable(socket, deadline, "handshake"); !ready)
    return std::unexpected(ready.error());
  iovec iov{bytes.data(), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do got = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got < 0) return fail_errno("shm: receiving the handshake", errno);
  // Take ownership of every descriptor first, so none leaks whatever goes wrong next.
  for (cmsghdr* header = CMSG_FIRSTHDR(&msg); header; header = CMSG_NXTHDR(&msg, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  if (got == 0)
    return fail(Errc::ConnectionRefused, "shm: the peer closed the connection during the handshake");
  if (static_cast<std::size_t>(got) != bytes.size() || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
    return fail(Errc::ProtocolError, "shm: handshake message of " + std::to_string(got) +
                                         " bytes, expected " + std::to_string(bytes.size()));
  return {};
}

Result<pid_t> peer_pid(int socket) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0)
    return fail_errno("shm: SO_PEERCRED", errno);
  return credentials.pid;
}

}  // namespace rdmakit::shm
