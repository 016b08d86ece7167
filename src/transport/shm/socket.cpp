#include "transport/shm/socket.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "core/private_dir.hpp"

namespace rdmakit::shm {
namespace {

// Whether one more descriptor could be opened now (false at RLIMIT_NOFILE).
bool has_free_fd() {
  int probe = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (probe < 0) return errno != EMFILE;
  ::close(probe);
  return true;
}

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
  // Linux creates the socket file with the socket inode's mode (less the umask): setting it before bind
  // means the file is never, not even for an instant, connectable by another uid.
  if (name.front() == '/' && ::fchmod(fd.get(), 0600) != 0)
    return fail_errno("shm: fchmod of a socket", errno);
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

Result<std::size_t> receive_message(int socket, std::span<std::byte> bytes, std::vector<UniqueFd>& fds,
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
  const std::size_t held_before = fds.size();
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
  if (msg.msg_flags & MSG_TRUNC)
    return fail(Errc::ProtocolError,
                "shm: handshake message longer than " + std::to_string(bytes.size()) + " bytes");
  // The kernel also truncates the descriptors it cannot install for want of a free fd number. Fewer than
  // the buffer holds means exactly that; a full buffer may be either, and then a free fd number decides
  // (looked at later, since another thread may close one meanwhile: that misnamed a limit in a test).
  const std::size_t received = fds.size() - held_before;
  if ((msg.msg_flags & MSG_CTRUNC) && (received < kMaxFds || !has_free_fd()))
    return std::unexpected(
        Error(Errc::ResourceExhausted,
              "shm: the peer's descriptors could not be received: " + std::string(std::strerror(EMFILE)) +
                  " (this process's file-descriptor limit, RLIMIT_NOFILE)",
              EMFILE));
  if (msg.msg_flags & MSG_CTRUNC)
    return fail(Errc::ProtocolError,
                "shm: handshake message with more than " + std::to_string(kMaxFds) + " descriptors");
  return static_cast<std::size_t>(got);
}

Result<PeerCredentials> peer_credentials(int socket) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0)
    return fail_errno("shm: SO_PEERCRED", errno);
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
}

Result<std::vector<uid_t>> parse_uid_list(std::string_view text) {
  std::vector<uid_t> uids;
  if (text.empty()) return uids;
  for (;;) {  // every item, including the one after a trailing comma, must be a uid
    auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    uid_t uid = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), uid);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() ||
        uid == static_cast<uid_t>(-1))
      return fail(Errc::InvalidArgument, "shm_allowed_uids: '" + std::string(item) + "' is not a uid");
    uids.push_back(uid);
    if (comma == std::string_view::npos) return uids;
    text = text.substr(comma + 1);
  }
}

Result<std::string> private_socket_dir() {
  // $XDG_RUNTIME_DIR only when it is ours (sudo keeps the invoking user's).
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  struct stat st {};
  bool own_runtime = runtime && runtime[0] == '/' && ::stat(runtime, &st) == 0 && st.st_uid == ::geteuid();
  Result<std::string> dir = own_runtime ? std::string(runtime) + "/rdmakit" : private_dir::in_tmp();
  if (!dir) return std::unexpected(Error(dir.error().code(), "shm: " + dir.error().message()));
  if (own_runtime)
    if (auto ok = private_dir::ensure(*dir); !ok)
      return std::unexpected(Error(ok.error().code(), "shm: " + ok.error().message()));
  return dir;
}

void remove_stale_sockets(const std::string& dir) noexcept {
  DIR* listing = ::opendir(dir.c_str());
  if (!listing) return;
  while (dirent* entry = ::readdir(listing)) {
    std::string_view name = entry->d_name;
    if (!name.starts_with("rdmakit-")) continue;
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(name.data() + 8, name.data() + name.size(), pid);
    if (ec != std::errc() || pid <= 0 || *end != '-') continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::string path = dir + "/" + std::string(name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
  }
  ::closedir(listing);
}

}  // namespace rdmakit::shm
