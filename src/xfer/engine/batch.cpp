// Per-request statuses of a batch, and the in-flight bounds.
#include <algorithm>
#include <thread>

#include "xfer/engine/engine_impl.hpp"

namespace rdmakit::xfer::detail {

std::uint32_t Credits::try_take(std::uint32_t wanted) {
  auto free = free_.load();
  while (free > 0) {
    auto granted = std::min(wanted, free);
    if (free_.compare_exchange_weak(free, free - granted)) {
      auto used = total_ - (free - granted);
      auto peak = peak_.load(std::memory_order_relaxed);
      while (used > peak && !peak_.compare_exchange_weak(peak, used, std::memory_order_relaxed)) {
      }
      return granted;
    }
  }
  return 0;
}

bool Credits::try_take_exact(std::uint32_t n) {
  auto free = free_.load();
  while (free >= n) {
    if (free_.compare_exchange_weak(free, free - n)) {
      auto used = total_ - (free - n);
      auto peak = peak_.load(std::memory_order_relaxed);
      while (used > peak && !peak_.compare_exchange_weak(peak, used, std::memory_order_relaxed)) {
      }
      return true;
    }
  }
  return false;
}

std::uint32_t Credits::acquire(std::uint32_t wanted, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    if (auto granted = try_take(wanted); granted != 0) return granted;
    std::unique_lock lock(mutex_);
    // Announced before looking again (both sequentially consistent): a release either sees the waiter and
    // notifies under the mutex, or happened before the look and is seen by it.
    waiters_.fetch_add(1);
    bool woke = freed_.wait_until(lock, deadline, [&] { return free_.load() > 0; });
    waiters_.fetch_sub(1);
    if (!woke) return 0;
  }
}

void Credits::release(std::uint32_t n) {
  free_.fetch_add(n);
  if (waiters_.load() == 0) return;
  std::lock_guard lock(mutex_);
  freed_.notify_all();
}

BatchImpl::BatchImpl(std::size_t size, BatchCallback callback)
    : slots_(size), remaining_(size), callback_(std::move(callback)) {}

// Polls completions itself for a while (the owner's bytes often land within microseconds: shm completes at
// post), then sleeps in slices, still polling between them.
Result<void> BatchImpl::wait(std::chrono::nanoseconds timeout) {
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + timeout;
  constexpr auto kSpin = std::chrono::microseconds(200);
  while (!done()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (progress_ && progress_()) continue;
    if (now - start < kSpin) {
      std::this_thread::yield();
      continue;
    }
    std::unique_lock lock(mutex_);
    finished_.wait_for(lock, std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(1)),
                       [&] { return done(); });
  }
  if (done()) return {};
  return fail(Errc::Timeout, "batch: " + std::to_string(remaining_.load()) + " of " +
                                 std::to_string(slots_.size()) + " requests still in flight");
}

std::optional<Result<void>> BatchImpl::status(std::size_t i) const {
  if (i >= slots_.size()) return Result<void>(fail(Errc::InvalidArgument, "no request " + std::to_string(i)));
  switch (slots_[i].state.load(std::memory_order_acquire)) {
    case 1:
      return Result<void>{};
    case 2: {
      std::lock_guard lock(mutex_);
      return Result<void>(std::unexpected(*slots_[i].error));
    }
    default:
      return std::nullopt;
  }
}

void BatchImpl::piece_done(std::size_t i, const Error* error) {
  auto& slot = slots_[i];
  if (error != nullptr) {
    std::lock_guard lock(mutex_);
    if (!slot.error) slot.error = *error;
    slot.has_error.store(true, std::memory_order_release);
  }
  // The request finishes with its last work request: no byte of it moves after it is reported.
  if (slot.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(i);
}

std::optional<Result<void>> BatchImpl::notification() const {
  std::lock_guard lock(mutex_);
  return notification_;
}

// One more thing to finish: the notification, sent once the requests are all done.
void BatchImpl::expect_notification(std::function<void()> send) {
  send_notification_ = std::move(send);
  has_notification_.store(true, std::memory_order_release);
  remaining_.fetch_add(1, std::memory_order_acq_rel);
}

void BatchImpl::notified(Result<void> outcome) {
  {
    std::lock_guard lock(mutex_);
    notification_ = std::move(outcome);
  }
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) all_done();
}

void BatchImpl::finish(std::size_t i) {
  auto& slot = slots_[i];
  bool failed = slot.has_error.load(std::memory_order_acquire);
  if (failed) failed_.fetch_add(1, std::memory_order_acq_rel);
  slot.state.store(failed ? 2 : 1, std::memory_order_release);
  auto left = remaining_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  // The last request finished: the notification goes now (on another thread: this may be a reaper).
  if (left == 1 && has_notification_.load(std::memory_order_acquire) && send_notification_) {
    auto send = std::move(send_notification_);
    send_notification_ = nullptr;
    send();
    return;
  }
  if (left == 0) all_done();
}

void BatchImpl::all_done() {
  {
    std::lock_guard lock(mutex_);  // a waiter between its check and its sleep holds it: no lost wake-up
  }
  finished_.notify_all();
  if (callback_) {
    if (auto self = self_.lock()) callback_(*self);
  }
}

}  // namespace rdmakit::xfer::detail
