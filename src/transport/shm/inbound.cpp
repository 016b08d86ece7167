// The receiving side of a connection: posting receives into the shared ring, taking the completions the
// initiator wrote there, serving atomics on memory the initiator cannot map.
#include <algorithm>
#include <cstring>

#include "core/rc_state.hpp"
#include "core/tsan.hpp"
#include "transport/shm/connection.hpp"

namespace rdmakit::shm {

// Under mutex_, after the RC prologue (Connection::post_recv).
Result<std::uint64_t> ShmConnection::post_recv_admitted(std::span<const Segment> sgl, std::uint64_t sequence,
                                                        std::unique_lock<std::mutex>&) {
  Inbound& inbound = in();
  std::uint64_t id = rc().recv_id(sequence);
  std::uint64_t capacity;
  std::uint32_t device_mask;
  // Device segments' allocations go beside the entry (layout.hpp, RecvDevice): the initiator opens them.
  if (check_local(sgl, true, &capacity, &device_mask, inbound.recv_device[recv_posted_ % kRingSlots].ref) !=
      Status::Success) {
    // A receive the initiator could not fill: fail it now, as the connection would when it is reached.
    const Completion failed{
        .id = id, .status = Status::LocalProtection, .opcode = Opcode::Recv, .connection = number()};
    enter_error(detail::completion_error(failed, "a segment is outside its region or lacks LocalWrite"),
                Status::Flushed);
    push(*recv_cq_, failed);
    return id;
  }
  RecvEntry& entry = inbound.recv[recv_posted_ % kRingSlots];
  entry.id = id;
  entry.count = static_cast<std::uint32_t>(sgl.size());
  entry.device_mask = device_mask;
  std::copy(sgl.begin(), sgl.end(), entry.sge);
  receives_.push_back(PostedReceive{id, capacity});
  tsan::release_to_peer();
  inbound.recv_posted.store(++recv_posted_, std::memory_order_release);
  recvs_queued_ = recv_posted_ - reaped_;
  peer_->ring();  // an initiator may be waiting for a receive (RNR)
  return id;
}

bool ShmConnection::reap() {
  Inbound& inbound = in();
  std::uint64_t produced = inbound.produced.load(std::memory_order_acquire);
  tsan::acquire_from_peer();
  std::uint64_t reaped = reaped_;  // our copy: the shared counter is the peer's to scribble on
  if (reaped == produced) return false;
  Status failed = Status::Success;
  bool malformed = false;
  for (; reaped != produced && !receives_.empty() && !malformed; ++reaped) {
    RecvDone done;  // one copy: the peer may rewrite the slot while we look
    std::memcpy(&done, &inbound.done[reaped % kRingSlots], sizeof(done));
    auto completion = decode_recv_done(done, receives_.front(), number());
    receives_.pop_front();
    if (!completion) {
      malformed = true;
      break;
    }
    if (!completion->ok() && failed == Status::Success) {
      failed = completion->status;
      rc().fail(detail::completion_error(*completion));  // recorded before the completion is visible
    }
    push(*recv_cq_, *completion);
  }
  reaped_ = reaped;
  recvs_queued_ = recv_posted_ - reaped_;
  reaped_seen_.store(reaped, std::memory_order_relaxed);
  inbound.reaped.store(reaped, std::memory_order_release);
  if (malformed)
    enter_error(Error(Errc::ProtocolError, "the shm peer wrote a malformed receive completion"),
                Status::Flushed);
  else if (failed != Status::Success)
    enter_error(
        Error(Errc::TransportFailure, "a receive failed: " + std::string(to_string(failed)), 0, failed),
        Status::Flushed);
  return true;
}

// The request is the peer's data: copied once, then checked against our private registration table (never
// the shared one), and only then carried out at the address we checked.
bool ShmConnection::serve_atomic() {
  AtomicRequest& request = in().atomic;
  if (request.state.load(std::memory_order_acquire) != kAtomicRequested) return false;
  tsan::acquire_from_peer();
  AtomicCall call = snapshot(request);
  Status status = validate_atomic(call);
  if (status == Status::Success)
    status = context_->registry().check_own(call.rkey, call.addr, 8, Access::RemoteAtomic);
  std::uint64_t old_value = 0;
  if (status == Status::Success && context_->registry().is_device(call.rkey))
    status =
        device_atomic(call.addr, static_cast<Opcode>(call.opcode), call.compare_add, call.swap, &old_value);
  else if (status == Status::Success)
    atomic_on(reinterpret_cast<std::uint64_t*>(call.addr), static_cast<Opcode>(call.opcode), call.compare_add,
              call.swap, &old_value);
  request.old_value = old_value;
  request.status = static_cast<std::uint64_t>(status);
  tsan::release_to_peer();
  request.state.store(kAtomicDone, std::memory_order_release);
  peer_->ring();
  return true;
}

// Whether progress() has anything to do, read without the lock: every poll of a completion queue calls
// progress() on every connection, and taking each connection's mutex there was two of the three lock
// round trips of an 8-byte WRITE (callgrind). Work that appears after this look is not lost: the poster
// carries out its own chain, a blocked head keeps has_pending_ set, and the peer's deliveries and atomic
// requests stay in shared memory (and ring the doorbell) until a later look sees them.
bool ShmConnection::has_work() const noexcept {
  if (has_pending_.load(std::memory_order_acquire)) return true;
  if (in().produced.load(std::memory_order_acquire) != reaped_seen_.load(std::memory_order_relaxed))
    return true;
  return in().atomic.state.load(std::memory_order_acquire) == kAtomicRequested;
}

bool ShmConnection::progress(Clock::time_point* next_deadline, bool poller) {
  if (!has_work()) return false;
  std::lock_guard lock(mutex_);
  if (rc().closed()) return false;
  bool any = reap();
  any |= serve_atomic();
  if (!pending_.empty() && !rc().in_error()) {
    any |= drain(poller ? Drainer::Poller : Drainer::ProgressThread);
    if (!pending_.empty() && next_deadline) {
      auto deadline = pending_.front().deadline;
      if (deadline != Clock::time_point{} && deadline < *next_deadline) *next_deadline = deadline;
    }
  }
  return any;
}

}  // namespace rdmakit::shm
