// Per-request statuses of a batch, and the in-flight bounds.
#include <algorithm>
#include <shared_mutex>
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

BatchPaths BatchImpl::paths() const {
  BatchPaths out;
  if (paths_.names)
    for (std::size_t i = 0; i < paths_.names->size(); ++i)
      if ((paths_.transports >> i) & 1u) out.transports.push_back((*paths_.names)[i]);
  for (unsigned m = 0; m < 32; ++m)
    if ((paths_.memory >> m) & 1u) out.memory.push_back(static_cast<MemoryPath>(m));
  out.file_requests_by_owner = paths_.file_by_owner;
  out.file_requests_local = paths_.file_local;
  return out;
}

BatchImpl::BatchImpl(std::span<const std::uint32_t> pieces, BatchCallback callback)
    : slots_(pieces.size()), remaining_(pieces.size()), callback_(std::move(callback)) {
  for (std::size_t i = 0; i < pieces.size(); ++i) {  // not shared yet: plain stores
    slots_[i].pending.store(pieces[i], std::memory_order_relaxed);
    slots_[i].single = pieces[i] == 1;
  }
}

void BatchImpl::attach(std::shared_ptr<const PreparedImpl> prepared,
                       std::vector<std::shared_ptr<const SegmentEntry>> entries,
                       std::vector<InflightOp> ops) {
  prepared_ = std::move(prepared);
  entries_ = std::move(entries);
  ops_ = std::move(ops);
}

// Polls completions itself for a while (the owner's bytes often land within microseconds: shm completes at
// post), as a reaper the progress threads stand aside for; then sleeps in slices, still polling between,
// and leaves the reaping to the progress threads meanwhile.
Result<void> BatchImpl::wait(std::chrono::nanoseconds timeout) {
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + timeout;
  constexpr auto kSpin = std::chrono::microseconds(200);
  bool reaping = false;
  auto reap = [&](bool as_reaper) {
    std::shared_lock lock(progress_->mutex);
    if (progress_->engine == nullptr) return false;
    if (as_reaper && !reaping) progress_->engine->enter_reaping();
    reaping = reaping || as_reaper;
    return progress_->engine->poll_rails();
  };
  auto stand_aside = [&] {
    if (!reaping) return;
    reaping = false;
    std::shared_lock lock(progress_->mutex);
    if (progress_->engine != nullptr) progress_->engine->leave_reaping();
  };
  while (!done()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (now - start < kSpin) {
      if (progress_ && reap(true)) continue;
      std::this_thread::yield();
      continue;
    }
    stand_aside();
    if (progress_ && reap(false)) continue;
    std::unique_lock lock(mutex_);
    finished_.wait_for(lock, std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(1)),
                       [&] { return done(); });
  }
  stand_aside();
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
      return Result<void>(std::unexpected(errors_.at(i)));
    }
    default:
      return std::nullopt;
  }
}

void BatchImpl::piece_done(std::size_t i, const Error* error) {
  auto& slot = slots_[i];
  if (error != nullptr) {
    std::lock_guard lock(mutex_);
    errors_.try_emplace(i, *error);  // the first failure of the request is what it reports
    slot.has_error.store(true, std::memory_order_release);
  }
  // The request finishes with its last work request: no byte of it moves after it is reported.
  if (slot.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    settle(i);
    retire(1);
  }
}

// A request carried by one work request needs no count: that one's success finishes it (a plain release
// store). Only requests split over several pieces pay an atomic decrement per piece.
void BatchImpl::ops_done(std::uint32_t begin, std::uint32_t n) {
  std::size_t finished = 0;
  for (std::uint32_t k = begin; k < begin + n; ++k) {
    for (auto r : ops_[k].op->requests) {
      auto& slot = slots_[r];
      if (slot.single) {
        slot.state.store(1, std::memory_order_release);
        ++finished;
      } else if (slot.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        settle(r);
        ++finished;
      }
    }
  }
  retire(finished);
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

void BatchImpl::settle(std::size_t i) {
  auto& slot = slots_[i];
  bool failed = slot.has_error.load(std::memory_order_acquire);
  if (failed) failed_.fetch_add(1, std::memory_order_acq_rel);
  slot.state.store(failed ? 2 : 1, std::memory_order_release);
}

void BatchImpl::retire(std::size_t n) {
  if (n == 0) return;
  auto left = remaining_.fetch_sub(n, std::memory_order_acq_rel) - n;
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
  // Nothing is in flight any more, and no thread looks at the records again: the plan, the resolutions (and
  // through them the peers' connections) are not kept alive by a batch its caller holds on to.
  {
    auto ops = std::move(ops_);
    auto entries = std::move(entries_);
    auto prepared = std::move(prepared_);
  }
  {
    std::lock_guard lock(mutex_);  // a waiter between its check and its sleep holds it: no lost wake-up
  }
  finished_.notify_all();
  if (callback_) {
    if (auto self = self_.lock()) callback_(*self);
  }
}

}  // namespace rdmakit::xfer::detail

namespace rdmakit::xfer {

std::string to_string(const BatchPaths& paths) {
  auto join = [](const auto& items, auto&& text) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + text(item);
    return out.empty() ? std::string("none") : out;
  };
  std::string out = "transports: " + join(paths.transports, [](const std::string& t) { return t; }) +
                    "; memory: " + join(paths.memory, [](MemoryPath m) { return rdmakit::to_string(m); });
  if (paths.file_requests_by_owner + paths.file_requests_local != 0)
    out += "; file requests: " + std::to_string(paths.file_requests_by_owner) + " by the owner, " +
           std::to_string(paths.file_requests_local) + " read locally";
  return out;
}

}  // namespace rdmakit::xfer
