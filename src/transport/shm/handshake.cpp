#include "transport/shm/handshake.hpp"

#include <sys/stat.h>

#include <cstring>

#include "transport/shm/layout.hpp"
#include "transport/shm/segment.hpp"

namespace rdmakit::shm {
namespace {

Result<std::size_t> size_of(int fd, const char* what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail_errno(std::string("shm handshake: fstat of the peer's ") + what, errno);
  return static_cast<std::size_t>(st.st_size);
}

Result<void> expect_size(int fd, std::size_t expected, const char* what) {
  auto size = size_of(fd, what);
  if (!size) return std::unexpected(size.error());
  if (*size != expected)
    return fail(Errc::ProtocolError, std::string("shm handshake: the peer's ") + what + " has " +
                                         std::to_string(*size) + " bytes, expected " +
                                         std::to_string(expected));
  return {};
}

}  // namespace

Result<void> send_hello(int socket, const Hello& hello, std::span<const int> fds) {
  return send_message(socket, std::as_bytes(std::span(&hello, 1)), fds);
}

Result<Hello> receive_hello(int socket, std::uint32_t role, std::size_t fd_count, std::vector<UniqueFd>& fds,
                            Deadline deadline) {
  Hello hello;
  if (auto ok = receive_message(socket, std::as_writable_bytes(std::span(&hello, 1)), fds, deadline); !ok)
    return std::unexpected(ok.error());
  if (hello.magic != kControlMagic || hello.version != kVersion || hello.role != role)
    return fail(Errc::ProtocolError, "shm handshake: the peer speaks another protocol or version");
  if (hello.control_size != sizeof(ControlSegment) || hello.link_size != sizeof(LinkSegment))
    return fail(Errc::ProtocolError, "shm handshake: the peer was built with another shared layout");
  if (fds.size() != fd_count)
    return fail(Errc::ProtocolError, "shm handshake: " + std::to_string(fds.size()) +
                                         " descriptors, expected " + std::to_string(fd_count));
  hello.name[sizeof(hello.name) - 1] = '\0';
  return hello;
}

Result<std::shared_ptr<PeerView>> adopt_peer(const Hello& hello, pid_t pid, std::vector<UniqueFd>& fds) {
  if (auto ok = expect_size(fds[0].get(), sizeof(ControlSegment), "control segment"); !ok)
    return std::unexpected(ok.error());
  if (auto ok = expect_size(fds[1].get(), hello.arena_size, "arena"); !ok) return std::unexpected(ok.error());
  auto peer = std::make_shared<PeerView>();
  auto control = map_shared(fds[0].get(), sizeof(ControlSegment), false);
  if (!control) return std::unexpected(control.error());
  peer->control = std::move(*control);
  const ControlSegment& ctl = peer->ctl();
  if (ctl.magic != kControlMagic || ctl.epoch != hello.epoch || ctl.pid != pid)
    return fail(Errc::ProtocolError,
                "shm handshake: the peer's control segment does not belong to pid " + std::to_string(pid));
  auto arena = map_shared(fds[1].get(), hello.arena_size, true);
  if (!arena) return std::unexpected(arena.error());
  peer->arena = std::move(*arena);
  peer->arena_base = hello.arena_base;
  peer->doorbell = std::move(fds[2]);
  peer->pid = pid;
  peer->epoch = hello.epoch;
  peer->id = hello.id;
  peer->name = hello.name;
  return peer;
}

Result<Mapping> adopt_link(int fd) {
  if (auto ok = expect_size(fd, sizeof(LinkSegment), "link segment"); !ok) return std::unexpected(ok.error());
  auto link = map_shared(fd, sizeof(LinkSegment), true);
  if (!link) return std::unexpected(link.error());
  const auto* segment = link->as<const LinkSegment>();
  if (segment->magic != kLinkMagic || segment->version != kVersion)
    return fail(Errc::ProtocolError, "shm handshake: the link segment is not initialized");
  return link;
}

}  // namespace rdmakit::shm
