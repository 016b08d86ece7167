#include "core/rc_state.hpp"

#include <algorithm>
#include <bit>

#include "core/clock.hpp"
#include "core/log.hpp"
#include "core/rc_check.hpp"

namespace rdmakit::detail {
namespace {

std::uint64_t ring_mask(std::uint64_t entries) {
  return std::bit_ceil(std::max<std::uint64_t>(entries, 1)) - 1;
}

}  // namespace

RcState::RcState(std::uint32_t number, std::uint32_t send_depth, std::uint32_t recv_depth)
    : number_(number),
      send_mask_(ring_mask(std::uint64_t{send_depth} + 1)),
      opcodes_(new Opcode[send_mask_ + 1]()),
      // Completions may wait in a queue well after their slot in the send queue was reused: remember
      // twice the deeper queue.
      taken_mask_(ring_mask(2 * std::uint64_t{std::max(send_depth, recv_depth)})),
      taken_send_(new std::atomic<std::uint64_t>[taken_mask_ + 1]()),
      taken_recv_(new std::atomic<std::uint64_t>[taken_mask_ + 1]()) {}

void RcState::completed(std::uint64_t id) noexcept {
  if (Connection::is_recv_id(id)) {
    recv_done.fetch_add(1, std::memory_order_relaxed);
  } else {
    // Posts racing from two threads may complete a later sequence first; the count is then briefly
    // ahead, never wrong once the queue drains.
    const std::uint64_t next = sequence_of(id) + 1;
    std::uint64_t done = send_done.load(std::memory_order_relaxed);
    while (done < next && !send_done.compare_exchange_weak(done, next, std::memory_order_relaxed)) {
    }
  }
  auto now = coarse_wall_clock().time_since_epoch();
  last_completion_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(),
                            std::memory_order_relaxed);
}

bool RcState::fail(Error why) {
  std::lock_guard lock(failure_mutex_);
  if (failure_) return false;
  failure_ = std::move(why);
  failed_.store(true, std::memory_order_release);
  return true;
}

bool RcState::enter_error(Error why, const std::optional<Completion>& head) {
  if (in_error()) return false;
  if (head && head->status != Status::Flushed && why.code() != Errc::TransportFailure)
    why = completion_error(*head, why.message());
  fail(std::move(why));  // the first failure stays
  return !in_error_.exchange(true, std::memory_order_acq_rel);
}

Result<void> RcState::check_post(std::span<const WorkRequest> chain, const Capabilities& caps,
                                 std::uint64_t peer_epoch) const {
  if (auto ok = check_chain(chain, caps, peer_epoch); !ok) return ok;
  if (closed()) return refuse_closed("post");
  return {};
}

Result<void> RcState::check_post_recv(std::span<const Segment> sgl, const Capabilities& caps) const {
  if (auto ok = check_recv(sgl, caps); !ok) return ok;
  if (closed()) return refuse_closed("post_recv");
  return {};
}

std::unexpected<Error> RcState::queue_full(std::string_view what, std::uint64_t queued, std::uint64_t depth) {
  const bool recv = what == "post_recv";
  return rdmakit::fail(Errc::ResourceExhausted, std::string(what) + ": " + (recv ? "receive" : "send") +
                                                    " queue full (" + std::to_string(queued) + " of " +
                                                    std::to_string(depth) + " outstanding; option " +
                                                    (recv ? "recv_queue_depth" : "send_queue_depth") + ")");
}

std::optional<Error> RcState::failure() const {
  std::lock_guard lock(failure_mutex_);
  return failure_;
}

Result<void> RcState::health() const {
  if (!failed()) return {};
  std::lock_guard lock(failure_mutex_);
  return std::unexpected(*failure_);
}

std::unexpected<Error> RcState::refuse_closed(std::string_view what) const {
  return rdmakit::fail(Errc::ConnectionBroken, std::string(what) + ": connection " + std::to_string(number_) +
                                                   " was closed by this side");
}

std::uint64_t RcState::outstanding() const noexcept {
  auto sends = send_posted.load(std::memory_order_relaxed) - send_done.load(std::memory_order_relaxed);
  auto recvs = recv_posted.load(std::memory_order_relaxed) - recv_done.load(std::memory_order_relaxed);
  // Racing posts may briefly see done ahead of posted.
  return (static_cast<std::int64_t>(sends) > 0 ? sends : 0) +
         (static_cast<std::int64_t>(recvs) > 0 ? recvs : 0);
}

ConnectionStats RcState::stats(const PeerInfo& peer) const {
  ConnectionStats s;
  s.connection = number_;
  s.peer = peer.name.empty() ? peer.address : log::printable(peer.name) + " (" + peer.address + ")";
  s.posted = send_posted.load(std::memory_order_relaxed) + recv_posted.load(std::memory_order_relaxed);
  s.completed = send_done.load(std::memory_order_relaxed) + recv_done.load(std::memory_order_relaxed);
  s.outstanding = outstanding();
  if (auto ns = last_completion_ns_.load(std::memory_order_relaxed))
    s.last_completion = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(ns)));
  if (auto why = failure()) {
    s.failed = true;
    s.failure = why->describe();
  }
  return s;
}

Result<RcState::Waitable> RcState::check_waitable(std::uint64_t id) const {
  if (Connection::connection_of(id) != number_)
    return rdmakit::fail(Errc::InvalidArgument, "wait: id " + std::to_string(id) + " belongs to connection " +
                                                    std::to_string(Connection::connection_of(id)) +
                                                    ", not to connection " + std::to_string(number_));
  const bool recv = Connection::is_recv_id(id);
  const std::uint64_t sequence = sequence_of(id);
  const std::uint64_t issued = (recv ? recv_posted : send_posted).load(std::memory_order_acquire);
  if (sequence >= issued)
    return rdmakit::fail(Errc::InvalidArgument, "wait: id " + std::to_string(id) +
                                                    " was never issued by connection " +
                                                    std::to_string(number_) + " (" + std::to_string(issued) +
                                                    " " + (recv ? "receives" : "sends") + " posted)");
  const std::uint64_t span = taken_mask_ + 1;
  if (issued - sequence > span) {
    const std::uint64_t done = (recv ? recv_done : send_done).load(std::memory_order_acquire);
    return sequence < done ? Waitable::IfQueued : Waitable::Yes;
  }
  const auto& ring = recv ? taken_recv_ : taken_send_;
  if (ring[sequence & taken_mask_].load(std::memory_order_acquire) == sequence + 1) return taken_error(id);
  return Waitable::Yes;
}

std::unexpected<Error> RcState::taken_error(std::uint64_t id) {
  return rdmakit::fail(Errc::InvalidArgument,
                       "wait: the completion of id " + std::to_string(id) +
                           " was already taken (by poll or wait), or it has none (an unsignaled success)");
}

void RcState::taken(std::uint64_t id) noexcept {
  const std::uint64_t sequence = sequence_of(id);
  auto& ring = Connection::is_recv_id(id) ? taken_recv_ : taken_send_;
  ring[sequence & taken_mask_].store(sequence + 1, std::memory_order_release);
}

Error completion_error(const Completion& completion, std::string_view detail) {
  std::string message = std::string(to_string(completion.opcode)) + " " + std::to_string(completion.id) +
                        " completed with " + std::string(to_string(completion.status));
  if (!detail.empty()) message += " (" + std::string(detail) + ")";
  return Error(Errc::TransportFailure, std::move(message), 0, completion.status);
}

}  // namespace rdmakit::detail
