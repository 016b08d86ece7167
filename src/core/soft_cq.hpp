// A completion queue in process memory, for the software transports (tcp, shm, fault). Completions are
// pushed by progress threads or posting threads; waiters spin on an atomic count or sleep on a
// condition variable. The lock is fine here: these transports pay a system call per operation anyway.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "rdmakit/completion.hpp"

namespace rdmakit {

class SoftCompletionQueue : public CompletionQueue {
 public:
  SoftCompletionQueue(WaitMode mode, std::chrono::microseconds spin) : CompletionQueue(mode, spin) {}

  // Thread-safe; wakes a sleeping waiter.
  void push(const Completion& completion);

 protected:
  std::size_t poll_transport(std::span<Completion> out) override;
  Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) override;
  // A transport that makes progress only when polled (no thread of its own) overrides this.
  virtual void progress() {}

 private:
  std::atomic<std::size_t> count_{0};  // lets a spinning poller skip the lock when empty
  std::mutex mutex_;
  std::condition_variable ready_;
  int sleepers_ = 0;  // guarded by mutex_
  std::deque<Completion> queue_;
};

}  // namespace rdmakit
