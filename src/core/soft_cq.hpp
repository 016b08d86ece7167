// A completion queue in process memory, for the software transports (tcp, shm, fault). Completions are
// pushed by progress threads or posting threads; waiters spin on an atomic count or sleep on a
// condition variable. The lock is fine here: these transports pay a system call per operation anyway.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "transport/provider.hpp"

namespace rdmakit {

class SoftCompletionQueue : public detail::CompletionQueueProvider {
 public:
  // Holds at most `depth` completions not yet polled, as a verbs CQ of that many entries.
  SoftCompletionQueue(WaitMode mode, std::chrono::microseconds spin, std::size_t depth)
      : CompletionQueueProvider(mode, spin), depth_(depth) {}

  // Thread-safe; wakes a sleeping waiter. One completion more than the depth puts the queue in the error
  // state (health()); it and every later one are lost, as on an overflowed verbs CQ.
  void push(const Completion& completion);
  Result<void> health() const override;
  std::size_t depth() const noexcept { return depth_; }

 protected:
  std::size_t poll_transport(std::span<Completion> out) override;
  Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) override;
  // A transport that makes progress only when polled (no thread of its own) overrides this.
  virtual void progress() {}

 private:
  const std::size_t depth_;
  std::atomic<std::size_t> count_{0};  // lets a spinning poller skip the lock when empty
  std::atomic<bool> overflowed_{false};
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  int sleepers_ = 0;  // guarded by mutex_
  std::deque<Completion> queue_;
};

}  // namespace rdmakit
