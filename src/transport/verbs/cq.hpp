// A completion queue on an ibv_cq, with a completion channel for blocking waits. Busy polling is a
// plain ibv_poll_cq; sleep_until arms the CQ, polls again (a completion that arrived between the last
// poll and the arming raises no event) and then sleeps on the channel's fd until the deadline.
// Besides the device's completions it delivers software ones: the Flushed completions of receives posted
// to a connection that had failed (flush_recv), which some devices never flush themselves.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/rc_state.hpp"
#include "transport/provider.hpp"
#include "transport/verbs/device.hpp"
#include "transport/verbs/monitor.hpp"
#include "transport/verbs/staging.hpp"

namespace rdmakit::verbs_impl {

// A work completion in rdmakit's terms. `posted` is the opcode recorded at post time (send side).
Completion to_completion(const ibv_wc& wc, Opcode posted) noexcept;

class VerbsCompletionQueue final : public detail::CompletionQueueProvider {
 public:
  static Result<std::shared_ptr<VerbsCompletionQueue>> create(std::shared_ptr<Device> device,
                                                              std::uint32_t depth, WaitMode mode,
                                                              std::chrono::microseconds spin);
  ~VerbsCompletionQueue() override;

  ibv_cq* cq() const noexcept { return cq_; }
  // The device reported IBV_EVENT_CQ_ERR for this queue: it overflowed, completions were lost.
  void overflowed() noexcept { overflowed_.store(true, std::memory_order_release); }
  Result<void> health() const override;
  std::uint32_t depth() const noexcept { return depth_; }
  // Connections whose completions arrive here, so the poller can keep their stats, opcodes and failure.
  void attach_track(std::shared_ptr<detail::RcState> track);
  void detach_track(const detail::RcState* track);
  // close(): polls into the backlog (where poll() finds them) until the track has nothing outstanding
  // or the deadline passes.
  void drain(const detail::RcState& track, std::chrono::steady_clock::time_point deadline);
  // A receive posted to a connection that has failed, completed Flushed in software instead of being posted:
  // its QP is in the error state, where the device should flush it, but rxe (Debian 12's kernel 6.1) leaves
  // it pending (its userspace post_recv never tells the kernel). Receives complete in order, so the Flushed
  // completion is delivered once every receive the connection posted before it has completed.
  void flush_recv(std::shared_ptr<detail::RcState> track, std::uint64_t id);

  // A work request whose local side is device memory staged through host memory (staging.hpp): its bounce
  // buffer, and for READ, atomics and RECV the device segments its bytes go to. Added before the post (the
  // completion may come at once); settled by the poller, which copies the bytes into device memory before
  // the user sees the completion. The completion is the user's own: no internal request exists.
  struct StagedOp {
    std::shared_ptr<Staging> staging;
    std::shared_ptr<StagingBuffer> buffer;
    std::vector<Segment> sink;  // empty: WRITE or SEND, nothing to copy back
    std::size_t length = 0;     // the request's bytes
  };
  void add_staged(std::uint64_t id, StagedOp op);
  // Requests [from, to) (ids of one connection and side) that were never posted.
  void cancel_staged(std::uint64_t from, std::uint64_t to);

 protected:
  std::size_t poll_transport(std::span<Completion> out) override;
  // Marks what it returns taken on the tracks it holds, under the one lock of the poll.
  std::size_t poll_taken(std::span<Completion> out) override;
  Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) override;

 private:
  VerbsCompletionQueue(std::shared_ptr<Device> device, WaitMode mode, std::chrono::microseconds spin)
      : CompletionQueueProvider(mode, spin), device_(std::move(device)) {}
  std::size_t poll_locked(std::span<Completion> out);
  // The backlog, the software completions and the device's, in that order (poll_transport's body).
  std::size_t poll_transport_locked(std::span<Completion> out);
  // Moves the software completions whose turn has come (every earlier receive of their connection done)
  // into `out`, in order; how many.
  std::size_t take_flushed_locked(std::span<Completion> out);
  detail::RcState* find(std::uint32_t number);
  // The staged requests `completion` completes: its own and the unsignaled ones posted before it on the same
  // queue. A failed copy fails the completion (GeneralError).
  void settle_staged_locked(Completion& completion);

  std::shared_ptr<Device> device_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::uint32_t depth_ = 0;
  // One uncontended lock per poll batch (not per completion): it guards the track table against
  // close() and keeps the backlog in order. Providers lock their CQ inside ibv_poll_cq anyway.
  std::mutex mutex_;
  std::vector<std::shared_ptr<detail::RcState>> tracks_;
  detail::RcState* last_ = nullptr;  // most CQs serve one connection: skip the search
  std::atomic<bool> has_backlog_{false};
  std::atomic<bool> overflowed_{false};
  std::deque<Completion> backlog_;
  // Software Flushed receives waiting for their turn (flush_recv), in the order they were posted.
  struct FlushedRecv {
    std::shared_ptr<detail::RcState> track;
    Completion completion;
  };
  std::deque<FlushedRecv> flushed_;
  std::map<std::uint64_t, StagedOp> staged_;  // by work request id: per connection and side, in post order
  std::atomic<bool> has_staged_{false};
  int wake_fd_ = -1;  // eventfd: wakes a waiter asleep on the channel when flush_recv adds a completion
};

// Reads a device's asynchronous events on the CM monitor's thread. A CQ that overflowed (IBV_EVENT_CQ_ERR)
// is marked, so that its waiters get ResourceExhausted at once instead of waiting for lost completions.
class AsyncEvents final : public CmWatcher {
 public:
  explicit AsyncEvents(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  // False when the library cannot read asynchronous events (nothing to watch).
  bool available() const noexcept;
  int fd() const noexcept { return device_->context()->async_fd; }
  void on_cm_readable() override;

 private:
  std::shared_ptr<Device> device_;
};

}  // namespace rdmakit::verbs_impl
