// Unix sockets for connection setup: a listener name, descriptor passing (SCM_RIGHTS) and the peer's
// credentials. After the handshake the socket carries no data; it stays open so that each side sees
// the other vanish (EOF / POLLHUP) the moment its process dies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/error.hpp"
#include "transport/shm/fd.hpp"

namespace rdmakit::shm {

using Deadline = std::chrono::steady_clock::time_point;

// "shm:<name>" (abstract namespace: nothing in the file system, gone with the socket) or "shm:/path".
// Returns what follows "shm:".
Result<std::string> parse_address(std::string_view address);

Result<UniqueFd> listen_unix(const std::string& name);
Result<UniqueFd> connect_unix(const std::string& name);
// Errc::Timeout when nobody connected before `deadline`.
Result<UniqueFd> accept_unix(int listener, Deadline deadline);

// One message with up to 8 descriptors.
Result<void> send_message(int socket, std::span<const std::byte> bytes, std::span<const int> fds);
// Receives one message of exactly bytes.size() bytes; descriptors that came with it go to `fds`.
Result<void> receive_message(int socket, std::span<std::byte> bytes, std::vector<UniqueFd>& fds,
                             Deadline deadline);

// The pid the kernel vouches for (SO_PEERCRED), not the one the peer claims.
Result<pid_t> peer_pid(int socket);

}  // namespace rdmakit::shm
