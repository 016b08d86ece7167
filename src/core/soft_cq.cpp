#include "core/soft_cq.hpp"

#include <algorithm>
#include <string>

namespace rdmakit {

void SoftCompletionQueue::push(const Completion& completion) {
  bool wake;
  {
    std::lock_guard lock(mutex_);
    if (overflowed_.load(std::memory_order_relaxed)) return;
    if (queue_.size() >= depth_) {
      overflowed_.store(true, std::memory_order_release);
      wake = sleepers_ > 0;  // a sleeping waiter learns of the error at once
    } else {
      queue_.push_back(completion);
      wake = sleepers_ > 0;
    }
    count_.store(queue_.size(), std::memory_order_release);
  }
  if (wake) ready_.notify_all();
}

Result<void> SoftCompletionQueue::health() const {
  if (!overflowed_.load(std::memory_order_acquire)) return {};
  return fail(Errc::ResourceExhausted,
              "completion queue overflowed: more than its depth of " + std::to_string(depth_) +
                  " completions were waiting to be polled; later ones were lost (size the queue for every "
                  "operation that can complete before it is polled: create_cq(depth), cq_depth, or "
                  "send/recv_queue_depth for a connection's own queues)");
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
  ready_.wait_until(lock, deadline,
                    [&] { return !queue_.empty() || overflowed_.load(std::memory_order_relaxed); });
  --sleepers_;
  return {};
}

}  // namespace rdmakit
