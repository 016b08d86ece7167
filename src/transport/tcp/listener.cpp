#include "transport/tcp/listener.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/clock.hpp"
#include "core/log.hpp"
#include "transport/tcp/connection.hpp"
#include "transport/tcp/context.hpp"

namespace rdmakit::tcp {

Result<std::shared_ptr<Acceptor>> Acceptor::start(Engine& engine, Fd listen_socket, PeerInfo self,
                                                  std::chrono::milliseconds handshake_timeout) {
  int flags = fcntl(listen_socket.get(), F_GETFL);
  if (flags < 0 || fcntl(listen_socket.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    return fail_errno("fcntl O_NONBLOCK on the listening socket", errno);
  auto acceptor = std::make_shared<Acceptor>(
      engine, std::move(listen_socket), std::move(self),
      std::chrono::duration_cast<std::chrono::nanoseconds>(handshake_timeout).count());
  if (auto ok = engine.add(acceptor->listen_key_, acceptor->listen_socket_.get(), acceptor); !ok)
    return std::unexpected(ok.error());
  acceptor->started_ = true;
  return acceptor;
}

namespace {

bool hung_up(int socket) {
  pollfd p{socket, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace

Acceptor::Acceptor(Engine& engine, Fd listen_socket, PeerInfo self, std::int64_t handshake_timeout_ns)
    : engine_(engine),
      listen_socket_(std::move(listen_socket)),
      listen_key_(engine.new_key()),
      mine_(encode_hello(self)),
      handshake_timeout_ns_(handshake_timeout_ns) {}

Acceptor::~Acceptor() {
  if (started_) engine_.remove(listen_key_, listen_socket_.get());
  for (auto& [key, pending] : pending_) engine_.remove(key, pending->socket.get());
}

bool Acceptor::on_readable() {
  std::lock_guard lock(mutex_);
  std::int64_t now = steady_ns();
  // Edge-triggered: take what is waiting, a bounded number per engine round (the engine calls again).
  for (int taken = 0;;) {
    if (taken == kAcceptsPerRound) return true;
    int fd = ::accept4(listen_socket_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      add_pending_locked(Fd(fd), now);
      ++taken;
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    log::warn("tcp", std::string("accept on the listening socket failed: ") + std::strerror(errno));
    // Out of descriptors or memory, a peer waits in the backlog that accept() would otherwise only time
    // out on: it reports this instead, naming the limit (the peer sees its handshake time out).
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      accept_errno_ = errno;
      greeted_ready_.notify_all();
    }
    return false;
  }
}

void Acceptor::add_pending_locked(Fd socket, std::int64_t now_ns) {
  // Many silent peers: the oldest has had the longest to speak, and goes first.
  if (pending_.size() >= kMaxPending) drop_locked(pending_.begin()->first, "too many handshakes pending");
  auto pending = std::make_shared<Pending>();
  pending->owner = weak_from_this();
  pending->key = engine_.new_key();
  pending->socket = std::move(socket);
  pending->deadline_ns = now_ns + handshake_timeout_ns_;
  if (auto ok = engine_.add(pending->key, pending->socket.get(), pending); !ok) {
    log::info("tcp", "cannot watch an incoming connection: " + ok.error().message());
    return;
  }
  pending_.emplace(pending->key, std::move(pending));
}

void Acceptor::drop_locked(std::uint64_t key, const char* why) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  engine_.remove(key, it->second->socket.get());
  auto address = peer_address(it->second->socket.get());
  log::info("tcp",
            std::string("dropped an incoming connection from ") + (address ? *address : "?") + ": " + why);
  pending_.erase(it);  // closes the socket
}

bool Acceptor::Pending::on_readable() {
  if (auto acceptor = owner.lock()) acceptor->read_hello(key);
  return false;
}

// Reads what has come of a peer's hello (never more: what follows belongs to the connection).
void Acceptor::read_hello(std::uint64_t key) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  Pending& pending = *it->second;
  for (;;) {
    ssize_t n = ::recv(pending.socket.get(), pending.hello.data() + pending.received,
                       pending.hello.size() - pending.received, MSG_DONTWAIT);
    if (n > 0) {
      pending.received += static_cast<std::size_t>(n);
      if (pending.received == pending.hello.size()) return greet_locked(pending);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    return drop_locked(key, n == 0 ? "closed during the handshake" : "failed during the handshake");
  }
}

// A complete hello: check it, and queue the peer for accept(), which answers with our hello.
void Acceptor::greet_locked(Pending& pending) {
  std::uint64_t key = pending.key;
  auto peer = decode_hello(pending.hello);
  if (!peer) {
    std::string why = peer.error().message();
    return drop_locked(key, why.c_str());
  }
  if (greeted_.size() >= kMaxGreeted) return drop_locked(key, "too many connections wait for accept()");
  if (auto address = peer_address(pending.socket.get())) peer->address = *address;
  engine_.remove(key, pending.socket.get());
  greeted_.push_back(Greeted{std::move(pending.socket), std::move(*peer)});
  pending_.erase(key);
  greeted_ready_.notify_one();
}

void Acceptor::on_tick(std::int64_t now_ns) {
  std::lock_guard lock(mutex_);
  while (!pending_.empty() && pending_.begin()->second->deadline_ns < now_ns) {
    // Keys grow with time, so the earliest deadline is first (the timeout is the same for all).
    drop_locked(pending_.begin()->first, "no hello within handshake_timeout_ms");
  }
}

// As with rdma_cm, the connecting side's connect() completes when this side accepts: our hello goes out
// here, not when the peer's arrived.
Result<Greeted> Acceptor::take(Deadline deadline) {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!greeted_ready_.wait_until(lock, deadline, [&] { return !greeted_.empty() || accept_errno_ != 0; }))
      return fail(Errc::Timeout, "accept: no peer completed a handshake in time");
    if (greeted_.empty()) {
      int error = std::exchange(accept_errno_, 0);
      const char* limit = error == EMFILE   ? " (this process's file-descriptor limit, RLIMIT_NOFILE)"
                          : error == ENFILE ? " (the system's file limit, fs.file-max)"
                                            : "";
      return std::unexpected(
          Error(Errc::ResourceExhausted,
                std::string("accept: a waiting peer could not be accepted: ") + std::strerror(error) + limit,
                error));
    }
    Greeted next = std::move(greeted_.front());
    greeted_.pop_front();
    // A fresh socket's send buffer holds far more than a hello: it goes out whole, or the peer is gone
    // (it gave up waiting) and the next one is taken. A peer that hung up after its hello (it waited in
    // the backlog while this process was out of descriptors, say) is gone too, though a send would pass.
    if (!hung_up(next.socket.get()) &&
        ::send(next.socket.get(), &mine_, sizeof(mine_), MSG_NOSIGNAL | MSG_DONTWAIT) ==
            static_cast<ssize_t>(sizeof(mine_)))
      return next;
    log::info("tcp", "peer " + log::printable(next.peer.name) + " at " + next.peer.address +
                         " left before it was accepted");
  }
}

TcpListener::TcpListener(std::shared_ptr<TcpContext> context, std::shared_ptr<Acceptor> acceptor,
                         std::string address)
    : context_(std::move(context)), acceptor_(std::move(acceptor)), address_(std::move(address)) {}

Result<std::shared_ptr<Connection>> TcpListener::accept(std::chrono::milliseconds timeout,
                                                        const ConnectOptions& options) {
  auto greeted = acceptor_->take(std::chrono::steady_clock::now() + timeout);
  if (!greeted) return std::unexpected(greeted.error());
  auto connection =
      TcpConnection::create(context_, std::move(greeted->socket), std::move(greeted->peer), options);
  if (!connection) return std::unexpected(connection.error());
  return std::shared_ptr<Connection>(std::move(*connection));
}

}  // namespace rdmakit::tcp
