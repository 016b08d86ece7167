#include "transport/verbs/track.hpp"

#include <bit>

#include "core/clock.hpp"

namespace rdmakit::verbs_impl {

Track::Track(std::uint32_t number, std::uint32_t send_depth)
    : number_(number), mask_(std::bit_ceil(std::uint64_t{send_depth} + 1) - 1),
      opcodes_(new Opcode[mask_ + 1]()) {}

void Track::completed(const Completion& completion, std::uint64_t sequence, bool recv) noexcept {
  if (recv) {
    recv_done.fetch_add(1, std::memory_order_relaxed);
  } else {
    // Verbs completes a queue in order: a completion for `sequence` means all unsignaled sends before
    // it are done too. (Posts racing from two threads may land out of sequence; the count is then
    // briefly ahead, never wrong once the queue drains.)
    std::uint64_t done = send_done.load(std::memory_order_relaxed);
    while (done < sequence + 1 && !send_done.compare_exchange_weak(done, sequence + 1, std::memory_order_relaxed)) {
    }
  }
  auto now = coarse_wall_clock().time_since_epoch();
  last_completion_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), std::memory_order_relaxed);
  if (completion.status != Status::Success && completion.status != Status::Flushed)
    fail("operation " + std::to_string(completion.id) + " (" + std::string(to_string(completion.opcode)) +
         ") completed with " + std::string(to_string(completion.status)));
}

void Track::fail(std::string why) {
  std::lock_guard lock(failure_mutex_);
  if (failed_.load(std::memory_order_relaxed)) return;
  failure_ = std::move(why);
  failed_.store(true, std::memory_order_release);
}

std::string Track::failure() const {
  std::lock_guard lock(failure_mutex_);
  return failure_;
}

std::uint64_t Track::outstanding() const noexcept {
  auto sends = send_posted.load(std::memory_order_relaxed) - send_done.load(std::memory_order_relaxed);
  auto recvs = recv_posted.load(std::memory_order_relaxed) - recv_done.load(std::memory_order_relaxed);
  return sends + recvs;
}

}  // namespace rdmakit::verbs_impl
