// Per-request statuses of a batch, and the in-flight bounds.
#include <algorithm>
#include <thread>

#include "xfer/engine/engine_impl.hpp"

namespace rdmakit::xfer::detail {

std::uint32_t Credits::acquire(std::uint32_t wanted, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (!freed_.wait_until(lock, deadline, [&] { return free_ > 0; })) return 0;
  auto granted = std::min(wanted, free_);
  free_ -= granted;
  auto used = total_ - free_;
  if (used > peak_.load(std::memory_order_relaxed)) peak_.store(used, std::memory_order_relaxed);
  return granted;
}

void Credits::release(std::uint32_t n) {
  {
    std::lock_guard lock(mutex_);
    free_ = std::min(total_, free_ + n);
  }
  freed_.notify_all();
}

std::uint32_t Credits::in_use() const {
  std::lock_guard lock(mutex_);
  return total_ - free_;
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
    case 1: return Result<void>{};
    case 2: {
      std::lock_guard lock(mutex_);
      return Result<void>(std::unexpected(*slots_[i].error));
    }
    default: return std::nullopt;
  }
}

void BatchImpl::piece_done(std::size_t i, const Error* error) {
  auto& slot = slots_[i];
  if (error != nullptr) {
    std::lock_guard lock(mutex_);
    if (!slot.error) slot.error = *error;
  }
  // The request finishes with its last work request: no byte of it moves after it is reported.
  if (slot.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(i);
}

void BatchImpl::finish(std::size_t i) {
  auto& slot = slots_[i];
  bool failed;
  {
    std::lock_guard lock(mutex_);
    failed = slot.error.has_value();
  }
  if (failed) failed_.fetch_add(1, std::memory_order_acq_rel);
  slot.state.store(failed ? 2 : 1, std::memory_order_release);
  std::size_t left;
  {
    std::lock_guard lock(mutex_);
    left = remaining_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  }
  if (left != 0) return;
  finished_.notify_all();
  if (callback_) {
    if (auto self = self_.lock()) callback_(*self);
  }
}

}  // namespace rdmakit::xfer::detail
