// A completion queue of the fault transport: wraps an inner queue and merges the inner completions with
// the synthetic ones of injected faults, keeping each connection's order (see link.hpp).
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transport/fault/link.hpp"

namespace rdmakit::fault {

class FaultCompletionQueue final : public detail::CompletionQueueProvider, private CompletionSink {
 public:
  FaultCompletionQueue(std::shared_ptr<CompletionQueue> inner, WaitMode mode, std::chrono::microseconds spin)
      : CompletionQueueProvider(mode, spin), inner_(std::move(inner)) {}

  const std::shared_ptr<CompletionQueue>& inner() const noexcept { return inner_; }
  // Routes the send-side completions of `link`'s connection through it.
  void attach_link(std::shared_ptr<Link> link);
  // A completion made by the fault transport itself (a receive flushed after the inner connection went).
  void add(const Completion& completion);
  // Counts the receive completions of `state`'s connection as they pass through (its sends are counted by
  // its Link), so that its RcState knows which are done.
  void attach_receiver(const std::shared_ptr<detail::RcState>& state);
  Result<void> health() const override { return inner_->health(); }

 protected:
  std::size_t poll_transport(std::span<Completion> out) override;
  Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) override;

 private:
  void emit(const Completion& completion) override { ready_.push_back(completion); }
  void route_locked(std::span<const Completion> batch);
  void drain_locked();
  std::size_t take_locked(std::span<Completion> out);

  std::shared_ptr<CompletionQueue> inner_;
  // One lock over polling the inner queue, routing and the ready list: two pollers must not reorder
  // completions of one connection between them. The fault transport is for tests; simple beats fast.
  std::mutex mutex_;
  std::unordered_map<std::uint32_t, std::shared_ptr<Link>> links_;
  std::unordered_map<std::uint32_t, std::weak_ptr<detail::RcState>> receivers_;
  std::deque<Completion> ready_;
};

}  // namespace rdmakit::fault
