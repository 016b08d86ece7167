#include "transport/tcp/completion_queue.hpp"

#include <algorithm>

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
  std::lock_guard lock(mutex_);
  for (const auto& weak : connections_)
    if (auto connection = weak.lock()) connection->poll_input();
}

}  // namespace rdmakit::tcp
