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

// A file-system name is bound with mode 0600 (only our uid can connect); an abstract name has no
// permissions at all, so every connection is checked by uid (peer_credentials) whichever it is.
Result<UniqueFd> listen_unix(const std::string& name);
// Our private directory for listener sockets: $XDG_RUNTIME_DIR/rdmakit when that is set and ours, else
// private_dir::in_tmp() (/tmp/rdmakit-<uid>, or a private fallback when another uid took that name);
// created mode 0700 and refused unless it is a real directory (not a symlink) owned by us with no
// permission for anyone else.
Result<std::string> private_socket_dir();
// Removes the sockets of listeners whose process died without removing them ("rdmakit-<pid>-..." whose pid
// no longer exists) from our private directory.
void remove_stale_sockets(const std::string& dir) noexcept;
Result<UniqueFd> connect_unix(const std::string& name);
// Errc::Timeout when nobody connected before `deadline`.
Result<UniqueFd> accept_unix(int listener, Deadline deadline);

// One message with up to 8 descriptors.
Result<void> send_message(int socket, std::span<const std::byte> bytes, std::span<const int> fds);
// Receives one message of at most bytes.size() bytes (a longer one is an error) and returns its length;
// descriptors that came with it go to `fds`.
Result<std::size_t> receive_message(int socket, std::span<std::byte> bytes, std::vector<UniqueFd>& fds,
                                    Deadline deadline);

// Who the kernel says is at the other end (SO_PEERCRED), not what the peer claims: the process that
// connected, or the one that called listen().
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
Result<PeerCredentials> peer_credentials(int socket);

// "1000,1001": the uids besides our own that may connect (option shm_allowed_uids). Pure, for tests.
Result<std::vector<uid_t>> parse_uid_list(std::string_view text);

}  // namespace rdmakit::shm
