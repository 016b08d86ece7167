#include "transport/tcp/engine.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "core/clock.hpp"
#include "core/log.hpp"

namespace rdmakit::tcp {
namespace {

constexpr int kTickMs = 20;  // deadline checks: well below any sensible timeout
constexpr std::uint64_t kWakeKey = ~std::uint64_t{0};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::start() {
  Fd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return fail_errno("epoll_create1", errno);
  Fd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return fail_errno("eventfd", errno);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeKey;
  if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &event) != 0) return fail_errno("epoll_ctl", errno);
  return std::unique_ptr<Engine>(new Engine(std::move(epoll), std::move(wake)));
}

Engine::Engine(Fd epoll, Fd wake)
    : epoll_(std::move(epoll)), wake_(std::move(wake)), thread_([this] { run(); }) {}

Engine::~Engine() {
  stopping_.store(true);
  std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  thread_.join();
}

Result<void> Engine::add(std::uint64_t key, int fd, std::weak_ptr<Pollable> target) {
  {
    std::lock_guard lock(mutex_);
    targets_[key] = std::move(target);
  }
  epoll_event event{};
  // Edge-triggered: a thread busy-polling a completion queue may be reading the socket; level-triggered
  // epoll would spin the engine on the same bytes until it is done.
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  event.data.u64 = key;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    std::lock_guard lock(mutex_);
    targets_.erase(key);
    return fail_errno("epoll_ctl add", errno);
  }
  return {};
}

void Engine::remove(std::uint64_t key, int fd) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard lock(mutex_);
  targets_.erase(key);
}

void Engine::kick(std::uint64_t key) {
  {
    std::lock_guard lock(mutex_);
    kicked_.push_back(key);
  }
  std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void Engine::set_interest(std::uint64_t key, int fd, bool input, bool output) {
  epoll_event event{};
  event.events = EPOLLRDHUP | EPOLLET | (input ? EPOLLIN : 0u) | (output ? EPOLLOUT : 0u);
  event.data.u64 = key;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event);
}

std::shared_ptr<Pollable> Engine::find(std::uint64_t key) const {
  std::lock_guard lock(mutex_);
  auto it = targets_.find(key);
  return it == targets_.end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<Pollable>> Engine::watched() const {
  std::vector<std::shared_ptr<Pollable>> alive;
  std::lock_guard lock(mutex_);
  for (const auto& [key, target] : targets_)
    if (auto strong = target.lock()) alive.push_back(std::move(strong));
  return alive;
}

void Engine::read_from(std::uint64_t key, std::vector<std::uint64_t>& again) {
  if (auto target = find(key); target && target->on_readable()) again.push_back(key);
}

void Engine::run_kicked(std::vector<std::uint64_t>& again) {
  std::uint64_t count;
  (void)!::read(wake_.get(), &count, sizeof(count));
  std::vector<std::uint64_t> keys;
  {
    std::lock_guard lock(mutex_);
    keys.swap(kicked_);
  }
  for (std::uint64_t key : keys) read_from(key, again);
}

void Engine::lease_until(std::int64_t until_ns) noexcept {
  std::int64_t current = lease_check_ns_.load(std::memory_order_relaxed);
  while (current == 0 || until_ns < current) {
    if (lease_check_ns_.compare_exchange_weak(current, until_ns, std::memory_order_relaxed)) {
      // The engine may be asleep until its next tick (20 ms): make it look at the earlier time.
      if (!on_engine_thread()) {
        std::uint64_t one = 1;
        (void)!::write(wake_.get(), &one, sizeof(one));
      }
      return;
    }
  }
}

// How long epoll_wait may sleep: until the tick, or until the earliest polling lease runs out (rounded up:
// a lease must have expired when we look).
int Engine::wait_ms(std::int64_t next_tick, bool busy) const noexcept {
  if (busy) return 0;  // input left over from the last round: only look for new events
  std::int64_t wake_at = next_tick;
  std::int64_t lease = lease_check_ns_.load(std::memory_order_relaxed);
  if (lease != 0 && lease < wake_at) wake_at = lease;
  std::int64_t left = wake_at - steady_ns();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>(kTickMs, (left + 999'999) / 1'000'000));
}

void Engine::check_leases(std::int64_t now) {
  std::int64_t lease = lease_check_ns_.load(std::memory_order_relaxed);
  if (lease == 0 || lease > now) return;
  // Connections still leased register their new expiry again from on_lease_check.
  lease_check_ns_.store(0, std::memory_order_relaxed);
  for (auto& target : watched()) target->on_lease_check(now);
}

// One round: new events, then the connections that had input left over from the round before (each reads
// a bounded amount per call), then deadlines. A flooding peer gets its share of every round, not all of it.
void Engine::run() {
  epoll_event events[64];
  std::vector<std::uint64_t> again, left_over;
  std::int64_t next_tick = steady_ns();
  for (;;) {
    // Also here, not only on the wake-up: run_kicked() drains the eventfd, and the destructor's write may
    // be among what it drained (a kick's wake-up being served when it came), after which no wake-up
    // is left to report. The destructor sets stopping_ before it writes, so this sees it within a round.
    if (stopping_.load()) return;
    left_over.swap(again);
    again.clear();
    int n = epoll_wait(epoll_.get(), events, 64, wait_ms(next_tick, !left_over.empty()));
    if (n < 0 && errno != EINTR) {
      log::error("tcp", std::string("epoll_wait failed; progress stops: ") + std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      std::uint64_t key = events[i].data.u64;
      if (key == kWakeKey) {
        if (stopping_.load()) return;
        run_kicked(again);
        continue;
      }
      auto target = find(key);
      if (!target) continue;
      if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        // Already due from the last round: served once below.
        if (std::find(left_over.begin(), left_over.end(), key) == left_over.end() && target->on_readable())
          again.push_back(key);
      }
      if (events[i].events & EPOLLOUT) target->on_writable();
    }
    for (std::uint64_t key : left_over) read_from(key, again);
    std::int64_t now = steady_ns();
    check_leases(now);
    if (now >= next_tick) {
      for (auto& target : watched()) target->on_tick(now);
      next_tick = now + kTickMs * 1'000'000;
    }
  }
}

}  // namespace rdmakit::tcp
