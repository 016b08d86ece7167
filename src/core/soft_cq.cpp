#include "core/soft_cq.hpp"

#include <algorithm>

namespace rdmakit {

void SoftCompletionQueue::push(const Completion& completion) {
  bool wake;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(completion);
    count_.store(queue_.size(), std::memory_order_release);
    wake = sleepers_ > 0;
  }
  if (wake) ready_.notify_all();
}

std::size_t SoftCompletionQueue::poll_transport(std::span<Completion> out) {
  progress();
  if (count_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard lock(mutex_);
  std::size_t n = std::min(out.size(), queue_.size());
  std::copy_n(queue_.begin(), n, out.begin());
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  count_.store(queue_.size(), std::memory_order_release);
  return n;
}

Result<void> SoftCompletionQueue::sleep_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  ++sleepers_;
  ready_.wait_until(lock, deadline, [&] { return !queue_.empty(); });
  --sleepers_;
  return {};
}

}  // namespace rdmakit
