// Completions and completion queues.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit {

namespace detail {
class RcState;
}
class Connection;

enum class Opcode : std::uint8_t {
  Write,         // RDMA WRITE
  WriteImm,      // RDMA WRITE with immediate (initiator side)
  Read,          // RDMA READ
  CompareSwap,   // 8-byte compare-and-swap, old value lands in the local segment
  FetchAdd,      // 8-byte fetch-and-add, old value lands in the local segment
  Send,          // two-sided SEND (optionally with immediate)
  Recv,          // a posted receive consumed by a SEND
  RecvWriteImm,  // a posted receive consumed by a WRITE with immediate (bytes = length written)
};
RDMAKIT_API std::string_view to_string(Opcode opcode) noexcept;

struct Completion {
  std::uint64_t id = 0;  // the id that post() / post_recv() returned
  Status status = Status::Success;
  Opcode opcode = Opcode::Write;
  bool has_imm = false;
  std::uint32_t bytes = 0;       // bytes received (receives) or moved (READ, atomics)
  std::uint32_t imm = 0;         // immediate value when has_imm
  std::uint32_t connection = 0;  // Connection::number() of the connection it belongs to

  bool ok() const noexcept { return status == Status::Success; }
};

// How a waiter waits: Spin polls without sleeping (lowest latency, burns a core); Block sleeps in the
// kernel until a completion arrives; Hybrid spins for Config::spin_us and then sleeps.
enum class WaitMode : std::uint8_t { Spin, Block, Hybrid };

// A completion queue, possibly shared by several connections. Thread-safe.
class RDMAKIT_API CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Moves up to out.size() completions into out, oldest first; 0 when none is ready. Never blocks.
  std::size_t poll(std::span<Completion> out);
  // Ok while the queue works. A queue holds at most its depth (create_cq(depth), Config::cq_depth; a
  // connection's own queues send/recv_queue_depth) completions not yet polled; one more puts it in the
  // error state, as an overflowed verbs CQ: later completions are lost, poll() still returns what it held,
  // and wait()/wait_for() then fail with this error (ResourceExhausted naming the depth).
  virtual Result<void> health() const { return {}; }
  // Waits until at least one completion is ready or `timeout` passes; returns how many it took,
  // 0 after a timeout.
  Result<std::size_t> wait(std::span<Completion> out, std::chrono::nanoseconds timeout);
  Result<std::size_t> wait(std::span<Completion> out, std::chrono::nanoseconds timeout, WaitMode mode);
  // The completion of operation `id`. Other completions met on the way stay queued, in order, for poll().
  // Errc::Timeout if it does not complete in time (an unsignaled operation never does); the queue's error
  // if it overflowed.
  Result<Completion> wait_for(std::uint64_t id, std::chrono::nanoseconds timeout);

  WaitMode default_wait_mode() const noexcept { return mode_; }

 protected:
  CompletionQueue(WaitMode mode, std::chrono::microseconds spin) noexcept : mode_(mode), spin_(spin) {}
  // Transport hooks: take ready completions without blocking; sleep until something may be ready
  // or the deadline passes (spurious wake-ups are fine).
  virtual std::size_t poll_transport(std::span<Completion> out) = 0;
  // poll_transport, then note_taken of what it returned. A transport that already looks up the
  // connections of its completions under its own lock may do both there: poll() runs once per spin of a
  // busy-polling wait, and the second lock and lookup were a tenth of an 8-byte verbs READ's user-space
  // instructions.
  virtual std::size_t poll_taken(std::span<Completion> out);
  virtual Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) = 0;
  // Tells the attached connections which completions the application took (what poll_taken adds to
  // poll_transport), for a transport whose own lookup missed one.
  void note_taken(std::span<const Completion> taken);

 private:
  std::size_t take_stashed(std::span<Completion> out);
  std::optional<Completion> take_from_stash(std::uint64_t id);
  Result<std::size_t> wait_with(std::span<Completion> out, std::chrono::nanoseconds timeout, WaitMode mode,
                                bool include_stash);
  // The connections completing here (Connection attaches and detaches itself), told which completions the
  // application took, so that a second wait() on one fails at once.
  friend class Connection;
  void attach(std::shared_ptr<detail::RcState> state);
  void detach(const detail::RcState* state);

  WaitMode mode_;
  std::chrono::microseconds spin_;
  // Completions that wait_for() passed over, returned first by poll().
  std::atomic<bool> has_stash_{false};
  std::mutex stash_mutex_;
  std::deque<Completion> stash_;
  std::mutex states_mutex_;
  std::vector<std::shared_ptr<detail::RcState>> states_;
};

}  // namespace rdmakit
