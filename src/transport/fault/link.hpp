// The state of one fault connection: the inner connection, the send-side operations in post order, and
// the connection's health. The send queue is kept here so that a synthetic completion (an injected
// failure) never overtakes the completions of operations posted before it, as on an RC queue pair.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "core/rc_state.hpp"
#include "rdmakit/fault.hpp"
#include "transport/provider.hpp"

namespace rdmakit::fault {

// Where drained completions go (the fault completion queue), in order.
class CompletionSink {
 public:
  virtual void emit(const Completion& completion) = 0;

 protected:
  ~CompletionSink() = default;
};

class Link {
 public:
  using Clock = std::chrono::steady_clock;

  // `state`: the fault connection's RC state (its failure, the ids it issued).
  Link(std::shared_ptr<Connection> inner, std::shared_ptr<detail::RcState> state, Injector& injector,
       std::chrono::milliseconds timeout);

  // post() and post_recv() of the fault connection, after the RC prologue's checks (Admission::Wrapper):
  // the request is well formed and the connection not closed by this side.
  Result<std::uint64_t> post(std::span<const WorkRequest> chain);
  // A receive: forwarded, or, once a fault closed the inner connection, accepted with its Flushed
  // completion in `flushed` (for the caller to queue: this runs under no queue's lock).
  Result<std::uint64_t> post_recv(std::span<const Segment> sgl, std::optional<Completion>& flushed);
  // Breaks the connection now (Disconnect): the inner connection is closed, pending operations flush.
  void sever(std::string why);
  void close();

  // Completion-queue side. Returns false when the completion is not one of this link's operations.
  bool on_completion(const Completion& completion);
  // Emits, in post order, every operation whose completion is known and due.
  void drain(Clock::time_point now, CompletionSink& sink);
  // When the operation at the head becomes due, if its completion is known.
  std::optional<Clock::time_point> next_release() const;
  bool finished() const;

  PeerInfo peer() const { return inner_->peer(); }
  ConnectionStats stats() const;
  Result<void> health() const;
  std::uint32_t number() const noexcept { return number_; }

 private:
  // One send-side operation, from post until its completion is emitted.
  struct Pending {
    std::uint64_t id = 0;
    bool signaled = true;    // as the user posted it; forwarded operations are always signaled inside
    bool known = false;      // its completion is known
    bool synthetic = false;  // made here, never forwarded
    bool dooms = false;      // emitting it moves the connection to the error state
    std::chrono::milliseconds delay{};
    Clock::time_point release{};  // not emitted before this
    Completion completion;
  };

  bool forward(std::span<const WorkRequest> chain, std::span<const std::chrono::milliseconds> delays,
               Result<std::uint64_t>& first);
  void add_synthetic(const WorkRequest& request, Status status, Clock::time_point release, bool dooms);
  void break_locked(Error why);

  std::shared_ptr<Connection> inner_;
  std::shared_ptr<detail::RcState> state_;
  Injector& injector_;
  std::chrono::milliseconds timeout_;
  std::uint32_t number_;

  mutable std::mutex mutex_;
  std::deque<Pending> queue_;
  std::uint64_t next_id_;      // the id a synthetic operation gets
  bool inner_closed_ = false;  // a fault closed the inner connection: receives flush here
};

}  // namespace rdmakit::fault
