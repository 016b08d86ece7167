// The connection handshake: each side sends who it is and, as SCM_RIGHTS, the descriptors of its
// control segment, its two shared arenas and its doorbell; the connecting side adds the link segment it
// created. Before either side sends anything about itself it checks the other's uid (SO_PEERCRED, vouched
// for by the kernel) against its allow-list; a refused connector gets a Refusal that says why and nothing
// else. The pid comes from SO_PEERCRED too and must match the one in the peer's control segment.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
  std::uint64_t rw_arena_base = 0;  // RemoteWrite / RemoteAtomic memory, mapped read-write by peers
  std::uint64_t rw_arena_size = 0;
  std::uint64_t ro_arena_base = 0;  // RemoteRead-only memory, sealed so peers map it read-only
  std::uint64_t ro_arena_size = 0;
  std::uint64_t control_size = 0;
  std::uint64_t link_size = 0;
  char name[192] = {};
};

// Sent instead of a Hello to a peer we refuse, so that it can say why; carries nothing about us.
struct Refusal {
  std::uint64_t magic = 0;
  char reason[120] = {};
};
constexpr std::uint64_t kRefusalMagic = 0x4553554645524b52ull;  // "RKREFUSE"

// Descriptors of a hello, in this order: control, rw arena, ro arena, doorbell (+ link from the connector).
enum HelloFd : std::size_t { kControlFd = 0, kRwArenaFd, kRoArenaFd, kDoorbellFd, kLinkFd };
constexpr std::size_t kHelloFds = 4;
// Our mapping of a peer's arena takes address space only; more than this is not a real peer.
constexpr std::uint64_t kMaxArenaSize = std::uint64_t{1} << 40;

Result<void> send_hello(int socket, const Hello& hello, std::span<const int> fds);
Result<void> send_refusal(int socket, const std::string& reason);
// Receives the peer's hello (or refusal) and checks it; the descriptors that came with it go to `fds`.
Result<Hello> receive_hello(int socket, std::uint32_t role, std::size_t fd_count, std::vector<UniqueFd>& fds,
                            Deadline deadline);
// The checks of a received message, apart from any I/O (also what the handshake fuzz target runs):
// a Hello of our protocol, version and layout from the expected role, or the reason of a Refusal.
Result<Hello> decode_hello(std::span<const std::byte> message, std::uint32_t role);
// Maps what the peer's hello and descriptors describe (fds[0..3]) after checking them.
Result<std::shared_ptr<PeerView>> adopt_peer(const Hello& hello, pid_t pid, std::vector<UniqueFd>& fds);
// Maps the link segment the connecting side sent, after checking its seals, size and magic.
Result<Mapping> adopt_link(int fd);

}  // namespace rdmakit::shm
