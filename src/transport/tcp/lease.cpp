// The polling lease. While a thread polls one of a connection's completion queues it reads the socket
// itself (poll_input), so the engine thread need not be woken by every arrival: with both on one core that
// wake-up preempted the poller and cost most of a small operation's latency. The first poll of a lease
// takes the socket's input out of the engine's epoll set; the engine takes it back when the lease runs out
// (it wakes for that: Engine::lease_until), and a waiter about to sleep gives it back at once. Hang-ups
// still reach the engine (EPOLLRDHUP stays armed), and so do the silent-peer and RNR deadlines (the tick).
#include "transport/tcp/connection.hpp"

namespace rdmakit::tcp {
namespace {

// A poller that stops without going to sleep leaves the peer's requests on this connection unread for at
// most this long; it is also how often the engine wakes while someone polls.
constexpr std::int64_t kLeaseNs = 1'000'000;

}  // namespace

void TcpConnection::renew_lease(std::int64_t now_ns) {
  bool leased = input_leased_.load(std::memory_order_relaxed);
  if (leased && polled_until_ns_.load(std::memory_order_relaxed) - now_ns > kLeaseNs / 2) return;
  std::int64_t until = now_ns + kLeaseNs;
  polled_until_ns_.store(until, std::memory_order_relaxed);
  if (leased) return;
  std::lock_guard lock(mutex_);
  if (shut_down_ || input_leased_.load(std::memory_order_relaxed)) return;
  input_leased_.store(true, std::memory_order_relaxed);
  update_interest_locked();
  engine_.lease_until(until);
}

void TcpConnection::end_lease() {
  polled_until_ns_.store(0, std::memory_order_relaxed);
  if (input_leased_.load(std::memory_order_relaxed)) give_back_input();
}

void TcpConnection::on_lease_check(std::int64_t now_ns) {
  if (!input_leased_.load(std::memory_order_relaxed)) return;
  std::int64_t until = polled_until_ns_.load(std::memory_order_relaxed);
  if (until > now_ns) {
    engine_.lease_until(until);  // renewed meanwhile: look again then
    return;
  }
  give_back_input();
}

void TcpConnection::give_back_input() {
  {
    std::lock_guard lock(mutex_);
    if (!input_leased_.load(std::memory_order_relaxed)) return;
    input_leased_.store(false, std::memory_order_relaxed);
    update_interest_locked();
  }
  // What arrived after the poller's last read. (Re-arming an edge-triggered socket that is already
  // readable reports it too; reading here does not depend on that.) More than one round's share: the
  // engine reads the rest.
  if (drain_input()) engine_.kick(engine_key_);
}

}  // namespace rdmakit::tcp
