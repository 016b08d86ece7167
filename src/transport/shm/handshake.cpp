#include "transport/shm/handshake.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "transport/shm/layout.hpp"
#include "transport/shm/segment.hpp"

namespace rdmakit::shm {
namespace {

Result<void> check_arena(std::uint64_t base, std::uint64_t size, const char* what) {
  if (size == 0 || size > kMaxArenaSize || size % 4096 != 0 || base + size < base)
    return fail(Errc::ProtocolError, std::string("shm handshake: the peer's ") + what + " of " +
                                         std::to_string(size) + " bytes at " + std::to_string(base) +
                                         " is not a valid arena");
  return {};
}

// The doorbell is written by our threads: it must be an eventfd that never blocks us. (The peer shares
// the open file description and could clear O_NONBLOCK later; that stalls only a thread of ours that
// rings it, and such a peer is one we chose to trust.)
Result<void> check_doorbell(int fd) {
  char target[64] = {};
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  bool eventfd;
  if (::readlink(link.c_str(), target, sizeof(target) - 1) >= 0) {
    eventfd = std::string_view(target) == "anon_inode:[eventfd]";
  } else {  // no /proc: at least an anonymous inode (no pipe, socket or file, which could block us)
    struct stat st {};
    eventfd = ::fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == 0;
  }
  if (!eventfd) return fail(Errc::ProtocolError, "shm handshake: the peer's doorbell is not an eventfd");
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || !(flags & O_NONBLOCK))
    return fail(Errc::ProtocolError, "shm handshake: the peer's doorbell eventfd is not non-blocking");
  return {};
}

Result<Mapping> map_checked(int fd, std::size_t size, bool writable, const char* what) {
  if (auto ok = check_received_memfd(fd, size, what); !ok) return std::unexpected(ok.error());
  return map_shared(fd, size, writable);
}

}  // namespace

Result<void> send_hello(int socket, const Hello& hello, std::span<const int> fds) {
  return send_message(socket, std::as_bytes(std::span(&hello, 1)), fds);
}

Result<void> send_refusal(int socket, const std::string& reason) {
  Refusal refusal{.magic = kRefusalMagic};
  std::strncpy(refusal.reason, reason.c_str(), sizeof(refusal.reason) - 1);
  auto sent = send_message(socket, std::as_bytes(std::span(&refusal, 1)), {});
  if (!sent) return sent;
  // Closing a Unix socket with the peer's hello still unread resets the connection, and the peer would
  // see ECONNRESET instead of our reason. Wait (briefly, bounded) for it to read the refusal and close,
  // discarding what it sent: recv() without a control buffer makes the kernel close its descriptors.
  ::shutdown(socket, SHUT_WR);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  char discard[sizeof(Hello)];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{socket, POLLIN, 0};
    if (::poll(&p, 1, 20) < 0 && errno != EINTR) break;
    if (p.revents && ::recv(socket, discard, sizeof(discard), MSG_DONTWAIT) == 0) break;  // it closed
  }
  return {};
}

Result<Hello> decode_hello(std::span<const std::byte> message, std::uint32_t role) {
  if (message.size() == sizeof(Refusal)) {
    Refusal refusal;
    std::memcpy(&refusal, message.data(), sizeof(refusal));
    if (refusal.magic == kRefusalMagic) {
      refusal.reason[sizeof(refusal.reason) - 1] = '\0';
      return fail(Errc::ConnectionRefused,
                  std::string("shm handshake: the peer refused us: ") + refusal.reason);
    }
  }
  if (message.size() != sizeof(Hello))
    return fail(Errc::ProtocolError, "shm handshake: message of " + std::to_string(message.size()) +
                                         " bytes, expected " + std::to_string(sizeof(Hello)));
  Hello hello;
  std::memcpy(&hello, message.data(), sizeof(hello));
  if (hello.magic != kControlMagic || hello.version != kVersion || hello.role != role)
    return fail(Errc::ProtocolError, "shm handshake: the peer speaks another protocol or version");
  if (hello.control_size != sizeof(ControlSegment) || hello.link_size != sizeof(LinkSegment))
    return fail(Errc::ProtocolError, "shm handshake: the peer was built with another shared layout");
  if (auto ok = check_arena(hello.rw_arena_base, hello.rw_arena_size, "writable arena"); !ok)
    return std::unexpected(ok.error());
  if (auto ok = check_arena(hello.ro_arena_base, hello.ro_arena_size, "read-only arena"); !ok)
    return std::unexpected(ok.error());
  hello.name[sizeof(hello.name) - 1] = '\0';
  return hello;
}

Result<Hello> receive_hello(int socket, std::uint32_t role, std::size_t fd_count, std::vector<UniqueFd>& fds,
                            Deadline deadline) {
  alignas(Hello) std::byte buffer[sizeof(Hello)];
  auto got = receive_message(socket, buffer, fds, deadline);
  if (!got) return std::unexpected(got.error());
  auto hello = decode_hello(std::span(buffer, *got), role);
  if (!hello) return hello;
  if (fds.size() != fd_count)
    return fail(Errc::ProtocolError, "shm handshake: " + std::to_string(fds.size()) +
                                         " descriptors, expected " + std::to_string(fd_count));
  return hello;
}

Result<std::shared_ptr<PeerView>> adopt_peer(const Hello& hello, pid_t pid, std::vector<UniqueFd>& fds) {
  if (auto ok = check_doorbell(fds[kDoorbellFd].get()); !ok) return std::unexpected(ok.error());
  auto peer = std::make_shared<PeerView>();
  auto control = map_checked(fds[kControlFd].get(), sizeof(ControlSegment), false, "control segment");
  if (!control) return std::unexpected(control.error());
  peer->control = std::move(*control);
  const ControlSegment& ctl = peer->ctl();
  if (ctl.magic != kControlMagic || ctl.epoch != hello.epoch || ctl.pid != pid)
    return fail(Errc::ProtocolError,
                "shm handshake: the peer's control segment does not belong to pid " + std::to_string(pid));
  auto rw = map_checked(fds[kRwArenaFd].get(), hello.rw_arena_size, true, "writable arena");
  if (!rw) return std::unexpected(rw.error());
  auto ro = map_checked(fds[kRoArenaFd].get(), hello.ro_arena_size, false, "read-only arena");
  if (!ro) return std::unexpected(ro.error());
  peer->writable = ArenaView{std::move(*rw), hello.rw_arena_base};
  peer->read_only = ArenaView{std::move(*ro), hello.ro_arena_base};
  peer->doorbell = std::move(fds[kDoorbellFd]);
  peer->pid = pid;
  peer->epoch = hello.epoch;
  peer->id = hello.id;
  peer->name = hello.name;
  return peer;
}

Result<Mapping> adopt_link(int fd) {
  auto link = map_checked(fd, sizeof(LinkSegment), true, "link segment");
  if (!link) return std::unexpected(link.error());
  const auto* segment = link->as<const LinkSegment>();
  if (segment->magic != kLinkMagic || segment->version != kVersion)
    return fail(Errc::ProtocolError, "shm handshake: the link segment is not initialized");
  return link;
}

}  // namespace rdmakit::shm
