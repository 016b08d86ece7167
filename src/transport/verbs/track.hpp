// What a connection and the completion queues it uses share: counters for ConnectionStats, the opcode of
// each posted send (a failed completion's wc.opcode is undefined in verbs, and a WRITE-with-immediate
// completes as IBV_WC_RDMA_WRITE), and the sticky failure. Written on the data path without locks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "rdmakit/completion.hpp"

namespace rdmakit::verbs_impl {

class Track {
 public:
  Track(std::uint32_t number, std::uint32_t send_depth);

  std::uint32_t number() const noexcept { return number_; }

  // Sequences of the next send / receive; ids are make_id(sequence).
  std::atomic<std::uint64_t> send_posted{0};
  std::atomic<std::uint64_t> recv_posted{0};
  std::atomic<std::uint64_t> send_done{0};  // sends are done in order: every sequence below this one
  std::atomic<std::uint64_t> recv_done{0};
  std::atomic<std::int64_t> last_completion_ns{0};  // system_clock, 0 = never

  void remember(std::uint64_t sequence, Opcode opcode) noexcept {
    opcodes_[sequence & mask_] = opcode;
  }
  Opcode posted_opcode(std::uint64_t sequence) const noexcept { return opcodes_[sequence & mask_]; }

  // Called by the poller for each completion of this connection.
  void completed(const Completion& completion, std::uint64_t sequence, bool recv) noexcept;

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // The first failure wins; later ones are ignored (sticky, like a QP in the error state).
  void fail(std::string why);
  std::string failure() const;
  std::uint64_t outstanding() const noexcept;

 private:
  std::uint32_t number_;
  std::uint64_t mask_;
  std::unique_ptr<Opcode[]> opcodes_;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mutex_;
  std::string failure_;
};

}  // namespace rdmakit::verbs_impl
