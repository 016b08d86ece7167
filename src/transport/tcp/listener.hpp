// The tcp listener. Connections are accepted and their hellos read by the engine thread, not inside
// accept(): a peer that connects and says nothing costs one pending entry until its (short) handshake
// deadline, never a turn of accept(). The listener says nothing about itself (name, id, epoch) until the
// peer's hello has arrived and is valid; accept() takes only such peers and answers with our hello (so the
// peer's connect() completes when we accept, as with rdma_cm).
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "core/fd.hpp"
#include "transport/provider.hpp"
#include "transport/tcp/engine.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/wire.hpp"

namespace rdmakit::tcp {

class TcpContext;

// A peer whose valid hello arrived, waiting for accept() to answer it.
struct Greeted {
  Fd socket;
  PeerInfo peer;
};

// Accepts sockets and reads their hellos on the engine thread.
class Acceptor final : public Pollable, public std::enable_shared_from_this<Acceptor> {
 public:
  // Pending handshakes beyond this evict the oldest; greeted peers beyond kMaxGreeted are turned away.
  static constexpr std::size_t kMaxPending = 128;
  static constexpr std::size_t kMaxGreeted = 1024;
  static constexpr int kAcceptsPerRound = 64;

  static Result<std::shared_ptr<Acceptor>> start(Engine& engine, Fd listen_socket, PeerInfo self,
                                                 std::chrono::milliseconds handshake_timeout);
  ~Acceptor() override;

  // The next greeted peer; Errc::Timeout when none came before `deadline`.
  Result<Greeted> take(Deadline deadline);

  bool on_readable() override;  // the listening socket: accept what is waiting
  void on_writable() override {}
  void on_tick(std::int64_t now_ns) override;
  void on_lease_check(std::int64_t) override {}

  // Public for make_shared; use start().
  Acceptor(Engine& engine, Fd listen_socket, PeerInfo self, std::int64_t handshake_timeout_ns);

 private:
  // One accepted socket whose hello has not (completely) arrived; the engine calls it for its input.
  struct Pending final : Pollable {
    std::weak_ptr<Acceptor> owner;
    std::uint64_t key = 0;
    Fd socket;
    std::int64_t deadline_ns = 0;
    std::array<std::byte, sizeof(Hello)> hello{};
    std::size_t received = 0;
    bool on_readable() override;
    void on_writable() override {}
    void on_tick(std::int64_t) override {}
    void on_lease_check(std::int64_t) override {}
  };

  void add_pending_locked(Fd socket, std::int64_t now_ns);
  void drop_locked(std::uint64_t key, const char* why);
  void read_hello(std::uint64_t key);
  void greet_locked(Pending& pending);

  Engine& engine_;
  const Fd listen_socket_;
  const std::uint64_t listen_key_;
  const Hello mine_;
  const std::int64_t handshake_timeout_ns_;

  std::mutex mutex_;
  std::condition_variable greeted_ready_;
  std::map<std::uint64_t, std::shared_ptr<Pending>> pending_;  // by key: the oldest first
  std::deque<Greeted> greeted_;
  int accept_errno_ = 0;  // accept4() failed for want of a resource (EMFILE...); take() reports it once
  bool started_ = false;
};

class TcpListener final : public detail::ListenerProvider {
 public:
  TcpListener(std::shared_ptr<TcpContext> context, std::shared_ptr<Acceptor> acceptor, std::string address);
  std::string address() const override { return address_; }
  Result<std::shared_ptr<Connection>> accept(std::chrono::milliseconds timeout,
                                             const ConnectOptions& options) override;

 private:
  std::shared_ptr<TcpContext> context_;
  std::shared_ptr<Acceptor> acceptor_;
  std::string address_;
};

}  // namespace rdmakit::tcp
