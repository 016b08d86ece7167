// The connection handshake: each side sends who it is and, as SCM_RIGHTS, the descriptors of its
// control segment, its arena and its doorbell; the connecting side adds the link segment it created.
// The pid comes from the kernel (SO_PEERCRED) and must match the one in the peer's control segment.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rdmakit/error.hpp"
#include "transport/shm/fd.hpp"
#include "transport/shm/peer.hpp"
#include "transport/shm/socket.hpp"

namespace rdmakit::shm {

struct Hello {
  std::uint64_t magic = 0;
  std::uint32_t version = 0;
  std::uint32_t role = 0;  // 0: connecting side, 1: accepting side
  std::uint64_t epoch = 0;
  std::uint64_t id = 0;
  std::uint64_t arena_base = 0;
  std::uint64_t arena_size = 0;
  std::uint64_t control_size = 0;
  std::uint64_t link_size = 0;
  char name[192] = {};
};

constexpr std::size_t kHelloFds = 3;  // control, arena, doorbell (+ link from the connecting side)

Result<void> send_hello(int socket, const Hello& hello, std::span<const int> fds);
Result<Hello> receive_hello(int socket, std::uint32_t role, std::size_t fd_count, std::vector<UniqueFd>& fds,
                            Deadline deadline);
// Maps what the peer's hello and descriptors describe (fds[0..2]) after checking them.
Result<std::shared_ptr<PeerView>> adopt_peer(const Hello& hello, pid_t pid, std::vector<UniqueFd>& fds);
// Maps the link segment the connecting side sent, after checking its size and magic.
Result<Mapping> adopt_link(int fd);

}  // namespace rdmakit::shm
