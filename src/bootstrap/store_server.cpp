#include "bootstrap/store_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <set>
#include <vector>

#include "bootstrap/store_wire.hpp"
#include "core/log.hpp"
#include "core/net.hpp"

namespace rdmakit::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;
// A connection that has not proven the secret by then is dropped, so silent strangers cannot hold
// client slots for long.
constexpr auto kHandshakeLimit = std::chrono::seconds(10);
// Bytes read from one client per wake-up: one busy client cannot starve the others.
constexpr std::size_t kReadBurst = 256 * 1024;
// Connections over store_max_clients that are still told why before they are closed; beyond, closed at once.
constexpr std::size_t kRefusing = 64;

Result<sockaddr_in> resolve(const std::string& host, std::uint16_t port) {
  auto address = net::resolve(host, port, AF_INET);
  if (!address) return fail(Errc::InvalidArgument, "store: " + address.error().message());
  sockaddr_in addr;
  std::memcpy(&addr, &address->storage, sizeof(addr));
  return addr;
}

Result<Fd> bind_listener(const std::string& host, std::uint16_t port, bool any_fallback) {
  auto addr = resolve(host, port);
  if (!addr) return std::unexpected(addr.error());
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail_errno("store: socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    if (errno != EADDRNOTAVAIL || !any_fallback)
      return fail_errno(
          "store: bind " + host + ":" + std::to_string(port) +
              (errno == EADDRNOTAVAIL ? " (not an address of this host; without RDMAKIT_JOB_SECRET "
                                        "the store does not fall back to all interfaces)"
                                      : ""),
          errno);
    addr->sin_addr.s_addr = htonl(INADDR_ANY);  // MASTER_ADDR names this host some other way
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0)
      return fail_errno("store: bind *:" + std::to_string(port), errno);
  }
  if (::listen(fd.get(), 1024) != 0) return fail_errno("store: listen", errno);
  return fd;
}

// Servers alive now, for the exit handler. Never destroyed (a static destructor could run before the
// handler, or while another thread still starts or stops a server).
struct LiveServers {
  std::mutex mutex;
  std::set<StoreServer*> servers;
};
LiveServers& live_servers() {
  static auto* live = new LiveServers;
  return *live;
}

// A server still running when the process exits (a communicator the application never destroyed: exit()
// runs no destructor of the stack) kept accepting while the exit handlers ran, and a client connecting
// then made the server thread call RAND_bytes after OpenSSL's own exit handler had torn it down: SIGSEGV
// instead of the exit code. Handlers run in the reverse order of registration, so ours is registered
// right after OpenSSL is initialized (which registers OpenSSL's handler, if it had not yet): it runs
// first and stops every live server, so no thread of ours touches OpenSSL, or anything else exit tears
// down, from then on. OPENSSL_INIT_NO_ATEXIT alone would keep OpenSSL usable but leave the thread running
// through the static destructors of everything else; destroying the server earlier is not ours to
// decide (the application owns the communicator).
void stop_live_servers() {
  auto& live = live_servers();
  std::lock_guard lock(live.mutex);
  for (StoreServer* server : live.servers) server->stop();
}

void install_exit_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Not opts 0: OpenSSL returns early for options already done (none is a subset of any), before it
    // registers its handler. SHA-256 digests are what the store's MACs use anyway.
    OPENSSL_init_crypto(OPENSSL_INIT_ADD_ALL_DIGESTS, nullptr);
    std::atexit(stop_live_servers);
  });
}

}  // namespace

struct StoreServer::Client {
  Fd fd;
  StoreSession session;
  std::string out;  // replies not yet taken by the socket
  Clock::time_point handshake_deadline;
  bool closing = false;  // close once `out` is sent

  // Sends what the socket takes now; false when the connection is gone.
  bool flush() {
    while (!out.empty()) {
      ssize_t n = ::send(fd.get(), out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      out.erase(0, static_cast<std::size_t>(n));
    }
    return true;
  }

  // Reads a burst and serves it; false when the client is to be dropped now.
  bool serve(StoreData& data) {
    char chunk[65536];
    for (std::size_t total = 0; total < kReadBurst && !closing;) {
      ssize_t n = ::recv(fd.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) return false;
      total += static_cast<std::size_t>(n);
      auto outcome = session.feed(std::string_view(chunk, static_cast<std::size_t>(n)), data, out);
      if (outcome == StoreSession::Outcome::Overflow) {
        log::warn("store", "dropped a client that left " + std::to_string(out.size()) +
                               " bytes of replies unread (store_max_client_buffer_bytes=" +
                               std::to_string(data.limits().max_client_buffer_bytes) + ")");
        return false;
      }
      closing = outcome == StoreSession::Outcome::Close;
      if (!flush()) return false;
    }
    return true;
  }
};

Result<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& host, std::uint16_t port,
                                                        std::string secret, StoreLimits limits) {
  install_exit_handler();
  auto listener = bind_listener(host, port, !secret.empty());
  if (!listener) return std::unexpected(listener.error());
  sockaddr_in bound{};
  socklen_t length = sizeof(bound);
  getsockname(listener->get(), reinterpret_cast<sockaddr*>(&bound), &length);
  Fd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return fail_errno("store: eventfd", errno);
  auto server = std::unique_ptr<StoreServer>(new StoreServer(
      std::move(*listener), std::move(stop), ntohs(bound.sin_port), std::move(secret), limits));
  server->thread_ = std::thread([s = server.get()] { s->run(); });
  auto& live = live_servers();
  std::lock_guard lock(live.mutex);
  live.servers.insert(server.get());
  return server;
}

StoreServer::StoreServer(Fd listener, Fd stop, std::uint16_t port, std::string secret, StoreLimits limits)
    : listener_(std::move(listener)),
      stop_(std::move(stop)),
      port_(port),
      secret_(std::move(secret)),
      data_(limits) {}

StoreServer::~StoreServer() {
  {
    // Under the registry's lock: the exit handler, which stops servers under it, never sees one being
    // destroyed.
    auto& live = live_servers();
    std::lock_guard lock(live.mutex);
    live.servers.erase(this);
  }
  stop();
}

void StoreServer::stop() {
  std::lock_guard lock(stop_mutex_);
  if (!thread_.joinable()) return;
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_.get(), &one, sizeof(one));
  thread_.join();
}

void StoreServer::run() {
  std::list<Client> clients;
  std::vector<pollfd> fds;
  std::vector<Client*> order;
  for (;;) {
    auto now = Clock::now();
    int timeout = -1;
    fds.assign({{stop_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}});
    order.clear();
    for (Client& c : clients) {
      short events = static_cast<short>((c.closing ? 0 : POLLIN) | (c.out.empty() ? 0 : POLLOUT));
      fds.push_back({c.fd.get(), events, 0});
      order.push_back(&c);
      if (!c.session.authenticated()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.handshake_deadline - now).count();
        timeout = timeout < 0 ? static_cast<int>(std::max<long>(left, 0) + 1)
                              : std::min(timeout, static_cast<int>(std::max<long>(left, 0) + 1));
      }
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    now = Clock::now();
    for (std::size_t i = 0; i < order.size(); ++i) {
      Client& c = *order[i];
      short revents = fds[i + 2].revents;
      bool keep = true;
      if (revents & (POLLERR | POLLNVAL)) keep = false;
      if (keep && (revents & POLLOUT)) keep = c.flush();
      if (keep && (revents & (POLLIN | POLLHUP))) keep = c.serve(data_);
      if (keep && c.closing && c.out.empty()) keep = false;
      if (keep && !c.session.authenticated() && now >= c.handshake_deadline) keep = false;
      if (!keep) c.fd = Fd();  // marks it for removal below
    }
    clients.remove_if([](const Client& c) { return !c.fd; });
    if (fds[1].revents & POLLIN) accept_clients(clients);
  }
}

// Takes every pending connection. Over store_max_clients, the newcomer is told why and closed.
void StoreServer::accept_clients(std::list<Client>& clients) {
  for (;;) {
    Fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) return;  // EAGAIN, or a connection that went away before we took it
    auto nonce = auth::fresh_nonce();
    if (!nonce || clients.size() >= data_.limits().max_clients + kRefusing) continue;  // closed at once
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    StoreSession session(secret_, *nonce);
    if (clients.size() >= data_.limits().max_clients) {
      session.refuse("too many clients (store_max_clients=" + std::to_string(data_.limits().max_clients) +
                     ")");
      log::warn("store", "refused a client: already serving store_max_clients=" +
                             std::to_string(data_.limits().max_clients));
    }
    clients.push_back(Client{std::move(fd), std::move(session), {}, Clock::now() + kHandshakeLimit});
  }
}

}  // namespace rdmakit::bootstrap
