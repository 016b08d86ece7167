// Connection setup: listeners on Unix sockets, connect, and the handshake that turns a socket into a
// connection (descriptor exchange, mappings, link segment).
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/log.hpp"
#include "transport/shm/connection.hpp"
#include "transport/shm/handshake.hpp"

namespace rdmakit::shm {
namespace {

class ShmListener final : public detail::ListenerProvider {
 public:
  ShmListener(std::shared_ptr<ShmContext> context, UniqueFd socket, std::string name)
      : context_(std::move(context)), socket_(std::move(socket)), name_(std::move(name)) {}
  ~ShmListener() override {
    if (name_.front() == '/') ::unlink(name_.c_str());  // abstract names vanish with the socket by themselves
  }

  std::string address() const override { return "shm:" + name_; }

  // A connector of a uid we do not serve is turned away (with a Refusal saying why) and accept() goes on
  // waiting: an abstract name can be reached by any local user, who must not be able to make our accept()
  // fail for the peer we are waiting for.
  Result<std::shared_ptr<Connection>> accept(std::chrono::milliseconds timeout,
                                             const ConnectOptions& options) override {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      auto socket = accept_unix(socket_.get(), deadline);
      if (!socket) return std::unexpected(socket.error());
      auto peer = context_->admit(socket->get(), false, address());
      if (!peer) {
        log::warn("shm", peer.error().message());
        continue;
      }
      return context_->establish(std::move(*socket), *peer, false, options, address());
    }
  }

 private:
  std::shared_ptr<ShmContext> context_;
  UniqueFd socket_;
  std::string name_;
};

std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

Result<std::shared_ptr<Listener>> ShmContext::listen(std::string_view address) {
  std::string text(address.empty() ? std::string_view(config().listen_address) : address);
  std::string name;
  if (text.starts_with("shm:")) {
    name = text.substr(4);
  } else if (!address.empty() && text != config().listen_address) {
    return fail(Errc::InvalidArgument,
                "listen: shm address '" + text +
                    "': expected shm:<name>, shm:/path/to/socket, or nothing for a unique name");
  }
  // No shm address given (the default listen_address is tcp's): a name no other listener has. A socket in
  // our private directory, so that no other uid can even connect; with an allow-list, an abstract name
  // (the allowed uids could not enter our directory), every connection being checked by uid either way.
  if (name.empty()) {
    name = "rdmakit-" + std::to_string(::getpid()) + "-" + hex(identity().epoch) + "-" +
           std::to_string(next_listener_.fetch_add(1));
    if (allowed_uids_.empty()) {
      auto dir = private_socket_dir();
      if (!dir) return std::unexpected(dir.error());
      remove_stale_sockets(*dir);  // left by processes that were killed
      name = *dir + "/" + name;
    }
  }
  auto socket = listen_unix(name);
  if (!socket) return std::unexpected(socket.error());
  return std::make_shared<ShmListener>(std::static_pointer_cast<ShmContext>(shared_from_this()),
                                       std::move(*socket), std::move(name));
}

Result<std::shared_ptr<Connection>> ShmContext::connect(std::string_view address,
                                                        const ConnectOptions& options) {
  auto name = parse_address(address);
  if (!name) return std::unexpected(name.error());
  auto socket = connect_unix(*name);
  if (!socket) return std::unexpected(socket.error());
  auto peer = admit(socket->get(), true, std::string(address));
  if (!peer) return std::unexpected(peer.error());
  return establish(std::move(*socket), *peer, true, options, std::string(address));
}

Result<PeerCredentials> ShmContext::admit(int socket, bool connector, const std::string& address) {
  auto peer = peer_credentials(socket);
  if (!peer) return peer;
  uid_t mine = ::geteuid();
  if (peer->uid == mine || std::ranges::find(allowed_uids_, peer->uid) != allowed_uids_.end()) return peer;
  std::string who = "uid " + std::to_string(peer->uid) + " (pid " + std::to_string(peer->pid) + ")";
  std::string rule =
      " is not ours (" + std::to_string(mine) + ") nor in shm_allowed_uids (RDMAKIT_SHM_ALLOWED_UIDS)";
  if (connector)
    return fail(Errc::ConnectionRefused, "shm: the listener at " + address + " runs as " + who + ", which" +
                                             rule + "; nothing was sent to it");
  // A connector learns why, and nothing else about us.
  (void)send_refusal(socket, "uid " + std::to_string(peer->uid) + " may not connect to this shm listener");
  return fail(Errc::ConnectionRefused,
              "shm: refused a connection to " + address + " from " + who + ", which" + rule);
}

Result<std::shared_ptr<Connection>> ShmContext::establish(UniqueFd socket, const PeerCredentials& credentials,
                                                          bool connector, const ConnectOptions& options,
                                                          std::string address) {
  auto send_cq = pick_cq(options.send_cq, config().send_queue_depth);
  if (!send_cq) return std::unexpected(send_cq.error());
  auto recv_cq = pick_cq(options.recv_cq, config().recv_queue_depth);
  if (!recv_cq) return std::unexpected(recv_cq.error());
  auto deadline = Clock::now() + config().connect_timeout;

  Hello mine{.magic = kControlMagic,
             .version = kVersion,
             .role = connector ? 0u : 1u,
             .epoch = identity().epoch,
             .id = identity().id,
             .rw_arena_base = rw_arena_->base(),
             .rw_arena_size = rw_arena_->size(),
             .ro_arena_base = ro_arena_->base(),
             .ro_arena_size = ro_arena_->size(),
             .control_size = sizeof(ControlSegment),
             .link_size = sizeof(LinkSegment)};
  std::strncpy(mine.name, identity().name.c_str(), sizeof(mine.name) - 1);
  std::vector<int> my_fds{control_fd_.get(), rw_arena_->fd(), ro_arena_->fd(), doorbell_.get()};

  std::vector<UniqueFd> fds;
  Mapping link;
  std::shared_ptr<PeerView> peer;
  if (connector) {
    // The connecting side creates the link segment: a fresh memfd is zeroed, which is the rings' empty state.
    auto link_fd = create_memfd("rdmakit-shm-link", sizeof(LinkSegment));
    if (!link_fd) return std::unexpected(link_fd.error());
    auto mapped = map_shared(link_fd->get(), sizeof(LinkSegment), true);
    if (!mapped) return std::unexpected(mapped.error());
    link = std::move(*mapped);
    link.as<LinkSegment>()->magic = kLinkMagic;
    link.as<LinkSegment>()->version = kVersion;
    if (auto sealed = seal_memfd(link_fd->get(), "rdmakit-shm-link", false); !sealed)
      return std::unexpected(sealed.error());
    my_fds.push_back(link_fd->get());
    if (auto sent = send_hello(socket.get(), mine, my_fds); !sent) return std::unexpected(sent.error());
    auto hello = receive_hello(socket.get(), 1, kHelloFds, fds, deadline);
    if (!hello) return std::unexpected(hello.error());
    auto adopted = peer_view(*hello, credentials.pid, fds);
    if (!adopted) return std::unexpected(adopted.error());
    peer = std::move(*adopted);
  } else {
    auto hello = receive_hello(socket.get(), 0, kHelloFds + 1, fds, deadline);
    if (!hello) return std::unexpected(hello.error());
    auto adopted = peer_view(*hello, credentials.pid, fds);
    if (!adopted) return std::unexpected(adopted.error());
    peer = std::move(*adopted);
    auto mapped = adopt_link(fds[kLinkFd].get());
    if (!mapped) return std::unexpected(mapped.error());
    link = std::move(*mapped);
    if (auto sent = send_hello(socket.get(), mine, my_fds); !sent) return std::unexpected(sent.error());
  }

  auto connection = std::make_shared<ShmConnection>(std::static_pointer_cast<ShmContext>(shared_from_this()),
                                                    next_number_.fetch_add(1), std::move(*send_cq),
                                                    std::move(*recv_cq), std::move(peer), std::move(link),
                                                    connector ? 0 : 1, std::move(socket), std::move(address));
  {
    std::lock_guard lock(connections_mutex_);
    connections_.push_back(connection.get());
  }
  eventfd_write(doorbell_.get(), 1);  // the progress thread watches the new socket from its next round
  return connection;
}

Result<std::shared_ptr<PeerView>> ShmContext::peer_view(const Hello& hello, pid_t pid,
                                                        std::vector<UniqueFd>& fds) {
  std::lock_guard lock(peers_mutex_);
  std::erase_if(peers_, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = peers_.find(hello.epoch); it != peers_.end()) {
    auto known = it->second.lock();
    if (known->pid == pid) return known;  // the descriptors just received are closed unused
  }
  auto adopted = adopt_peer(hello, pid, fds);
  if (!adopted) return adopted;
  peers_[hello.epoch] = *adopted;
  return adopted;
}

}  // namespace rdmakit::shm
