#include "transport/tcp/completion_queue.hpp"

#include <algorithm>

#include "core/clock.hpp"
#include "transport/tcp/connection.hpp"

namespace rdmakit::tcp {

void TcpCompletionQueue::attach(const std::shared_ptr<TcpConnection>& connection) {
  std::lock_guard lock(mutex_);
  std::erase_if(connections_, [](const auto& weak) { return weak.expired(); });
  connections_.push_back(connection);
}

void TcpCompletionQueue::progress() {
  // Called on every poll: no allocation. A connection's destructor never takes this lock, so it may run
  // here when a completion drops the last reference.
  std::int64_t now = steady_ns();
  std::lock_guard lock(mutex_);
  for (const auto& weak : connections_)
    if (auto connection = weak.lock()) {
      connection->renew_lease(now);
      connection->poll_input(now);
    }
}

// About to sleep: the engine thread must watch our connections' input again before we do.
Result<void> TcpCompletionQueue::sleep_until(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(mutex_);
    for (const auto& weak : connections_)
      if (auto connection = weak.lock()) connection->end_lease();
  }
  return SoftCompletionQueue::sleep_until(deadline);
}

}  // namespace rdmakit::tcp
