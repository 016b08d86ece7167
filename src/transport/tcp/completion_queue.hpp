// The tcp transport's completion queue: a SoftCompletionQueue whose poll() also reads the sockets of the
// connections that complete on it (busy-polling progress), so a polling thread gets its completions without
// waiting for the engine thread to wake up and hand them over. Sleeping waiters still rely on the engine.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "core/soft_cq.hpp"

namespace rdmakit::tcp {

class TcpConnection;

class TcpCompletionQueue final : public SoftCompletionQueue {
 public:
  using SoftCompletionQueue::SoftCompletionQueue;
  void attach(const std::shared_ptr<TcpConnection>& connection);

 protected:
  void progress() override;
  Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) override;

 private:
  std::mutex mutex_;
  std::vector<std::weak_ptr<TcpConnection>> connections_;
};

}  // namespace rdmakit::tcp
