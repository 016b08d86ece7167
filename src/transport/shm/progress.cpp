// The context's progress thread. It sleeps on the doorbell eventfd and on every connection's socket;
// peers ring the doorbell only while the `sleeping` flag in our control segment is set, so a busy
// context costs them no system call. A socket that hangs up means the peer died or closed.
#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>

#include "transport/shm/connection.hpp"

namespace rdmakit::shm {
namespace {

// Nothing waits forever, and a deadline that passed while we slept is handled promptly.
constexpr auto kIdleSleep = std::chrono::milliseconds(100);
// How long one poll keeps peers from ringing. A poller that stops without going to sleep (it returns to
// computing) leaves messages that arrived meanwhile to the progress thread, which sleeps no longer than
// the lease: this is the worst extra latency, and the progress thread's wake-up rate while someone polls.
constexpr std::int64_t kLeaseNs = 1'000'000;

}  // namespace

bool ShmContext::progress_all(bool block, Clock::time_point* next_deadline) {
  std::unique_lock lock(connections_mutex_, std::defer_lock);
  if (block)
    lock.lock();
  else if (!lock.try_lock())
    return false;
  bool any = false;
  for (ShmConnection* connection : connections_) any |= connection->progress(next_deadline, !block);
  return any;
}

void ShmContext::wake() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (needs_doorbell(*control_.as<ControlSegment>())) eventfd_write(doorbell_.get(), 1);
}

// Called on every poll of one of our completion queues. Renews the lease once half of it is gone, so a
// spinning poller writes the shared line about once per half lease, not once per poll.
void ShmContext::note_polling() noexcept {
  auto& until = control_.as<ControlSegment>()->polled_until;
  std::int64_t now = steady_ns();
  std::int64_t current = until.load(std::memory_order_relaxed);
  if (current - now > kLeaseNs / 2) return;
  until.store(now + kLeaseNs, std::memory_order_relaxed);
  // A new lease: the progress thread may be asleep on a timeout longer than the lease, and peers stop
  // ringing now. Wake it so that it goes back to sleep bounded by the lease.
  if (current <= now) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (control_.as<ControlSegment>()->sleeping.load(std::memory_order_relaxed))
      eventfd_write(doorbell_.get(), 1);
  }
}

// A poller is about to sleep: end the lease, then take whatever a peer published without ringing while it
// ran. The fence pairs with the publisher's: either it sees the lease gone and rings, or this round sees
// what it published. The round waits for the progress thread's (blocking lock), so nothing slips between.
void ShmContext::end_polling() {
  auto& until = control_.as<ControlSegment>()->polled_until;
  if (until.load(std::memory_order_relaxed) == 0) return;
  until.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  progress_all(true);
}

void ShmContext::run_progress() {
  auto* control = control_.as<ControlSegment>();
  while (!stop_.load(std::memory_order_acquire)) {
    auto deadline = Clock::now() + kIdleSleep;
    // While a poller holds the lease it does the work; a second thread on it would only take turns with
    // it for the lock and the core (measured: 16 MiB WRITEs at a third of the speed).
    if (!leased() && progress_all(true, &deadline)) continue;
    control->sleeping.store(1, std::memory_order_relaxed);
    // Pairs with PeerView::ring(): either the peer sees `sleeping` and writes the eventfd, or we see
    // what it published before it looked.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (leased() || !progress_all(true, &deadline)) sleep_on_doorbell(bounded_by_lease(deadline));
    control->sleeping.store(0, std::memory_order_relaxed);
  }
}

bool ShmContext::leased() const noexcept {
  return control_.as<ControlSegment>()->polled_until.load(std::memory_order_relaxed) > steady_ns();
}

// While a poller holds the lease, peers do not ring: sleep no longer than the lease, then look again.
Clock::time_point ShmContext::bounded_by_lease(Clock::time_point deadline) const noexcept {
  std::int64_t until = control_.as<ControlSegment>()->polled_until.load(std::memory_order_relaxed);
  if (until <= steady_ns()) return deadline;
  return std::min(deadline, Clock::time_point(std::chrono::nanoseconds(until)));
}

void ShmContext::sleep_on_doorbell(Clock::time_point deadline) {
  std::vector<pollfd> fds{{doorbell_.get(), POLLIN, 0}};
  std::vector<std::uint32_t> numbers;
  {
    std::lock_guard lock(connections_mutex_);
    for (ShmConnection* connection : connections_) {
      if (connection->gone()) continue;
      fds.push_back({connection->socket_fd(), POLLIN, 0});
      numbers.push_back(connection->number());
    }
  }
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
  if (n <= 0) return;
  eventfd_t ignored;
  if (fds[0].revents) eventfd_read(doorbell_.get(), &ignored);
  std::lock_guard lock(connections_mutex_);
  for (std::size_t i = 1; i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    // After the handshake a socket carries nothing: readable means EOF, that is, the peer is gone.
    auto it = std::find_if(connections_.begin(), connections_.end(),
                           [&](ShmConnection* c) { return c->number() == numbers[i - 1]; });
    if (it != connections_.end()) (*it)->peer_gone();
  }
}

}  // namespace rdmakit::shm
