#include "transport/fault/fault_cq.hpp"

#include <algorithm>
#include <array>

namespace rdmakit::fault {
namespace {

// A sleeper wakes at least this often: synthetic completions are made by posting threads and by the
// clock, neither of which can wake a waiter sleeping in the inner queue.
constexpr auto kSleepSlice = std::chrono::milliseconds(1);

}  // namespace

void FaultCompletionQueue::attach_link(std::shared_ptr<Link> link) {
  std::lock_guard lock(mutex_);
  links_[link->number()] = std::move(link);
}

void FaultCompletionQueue::attach_receiver(const std::shared_ptr<detail::RcState>& state) {
  std::lock_guard lock(mutex_);
  std::erase_if(receivers_, [](const auto& entry) { return entry.second.expired(); });
  receivers_[state->number()] = state;
}

void FaultCompletionQueue::add(const Completion& completion) {
  std::lock_guard lock(mutex_);
  ready_.push_back(completion);
}

void FaultCompletionQueue::route_locked(std::span<const Completion> batch) {
  for (const Completion& completion : batch) {
    bool routed = false;
    if (!Connection::is_recv_id(completion.id)) {
      auto it = links_.find(completion.connection);
      routed = it != links_.end() && it->second->on_completion(completion);
    }
    if (!routed && Connection::is_recv_id(completion.id)) {
      auto it = receivers_.find(completion.connection);
      if (auto state = it == receivers_.end() ? nullptr : it->second.lock()) state->completed(completion);
    }
    if (!routed) ready_.push_back(completion);  // receives and strays pass straight through
  }
}

void FaultCompletionQueue::drain_locked() {
  const auto now = Link::Clock::now();
  for (auto it = links_.begin(); it != links_.end();) {
    it->second->drain(now, *this);
    it = it->second->finished() ? links_.erase(it) : std::next(it);
  }
}

std::size_t FaultCompletionQueue::take_locked(std::span<Completion> out) {
  std::size_t n = std::min(out.size(), ready_.size());
  std::copy_n(ready_.begin(), n, out.begin());
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

std::size_t FaultCompletionQueue::poll_transport(std::span<Completion> out) {
  std::lock_guard lock(mutex_);
  std::array<Completion, 32> batch;
  while (std::size_t n = inner_->poll(batch)) {
    route_locked(std::span(batch).first(n));
    if (n < batch.size()) break;
  }
  drain_locked();
  return take_locked(out);
}

Result<void> FaultCompletionQueue::sleep_until(std::chrono::steady_clock::time_point deadline) {
  std::lock_guard lock(mutex_);
  if (!ready_.empty()) return {};
  auto wake = std::min(deadline, std::chrono::steady_clock::now() + kSleepSlice);
  for (const auto& [number, link] : links_)
    if (auto release = link->next_release()) wake = std::min(wake, *release);
  auto timeout = wake - std::chrono::steady_clock::now();
  if (timeout <= std::chrono::nanoseconds::zero()) return {};
  std::array<Completion, 32> batch;
  auto got = inner_->wait(batch, timeout, WaitMode::Block);
  if (!got) return std::unexpected(got.error());
  route_locked(std::span(batch).first(*got));
  return {};
}

}  // namespace rdmakit::fault
