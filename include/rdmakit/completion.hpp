// Completions and completion queues.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit {

namespace detail {
class CompletionQueueProvider;  // src/transport/provider.hpp: what a transport implements
}

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

// A completion queue, possibly shared by several connections. Thread-safe. A facade, as Connection: the
// library forwards to the transport's provider (src/transport/provider.hpp).
class RDMAKIT_API CompletionQueue {
 public:
  virtual ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Moves up to out.size() completions into out, oldest first; 0 when none is ready. Never blocks.
  std::size_t poll(std::span<Completion> out);
  // Ok while the queue works. A queue holds at most its depth (create_cq(depth), Config::cq_depth; a
  // connection's own queues send/recv_queue_depth) completions not yet polled; one more puts it in the
  // error state, as an overflowed verbs CQ: later completions are lost, poll() still returns what it held,
  // and wait()/wait_for() then fail with this error (ResourceExhausted naming the depth).
  Result<void> health() const;
  // Waits until at least one completion is ready or `timeout` passes; returns how many it took,
  // 0 after a timeout.
  Result<std::size_t> wait(std::span<Completion> out, std::chrono::nanoseconds timeout);
  Result<std::size_t> wait(std::span<Completion> out, std::chrono::nanoseconds timeout, WaitMode mode);
  // The completion of operation `id`. Other completions met on the way stay queued, in order, for poll().
  // Errc::Timeout if it does not complete in time (an unsignaled operation never does); the queue's error
  // if it overflowed.
  Result<Completion> wait_for(std::uint64_t id, std::chrono::nanoseconds timeout);

  WaitMode default_wait_mode() const noexcept;

 private:
  friend class detail::CompletionQueueProvider;
  CompletionQueue() noexcept = default;
};

}  // namespace rdmakit
