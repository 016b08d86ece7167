// Connection control path: construction, completion bookkeeping, the error state, close.
#include "transport/shm/connection.hpp"

#include <sys/socket.h>

#include <thread>

#include "core/clock.hpp"
#include "core/tsan.hpp"

namespace rdmakit::shm {

ShmConnection::ShmConnection(std::shared_ptr<ShmContext> context, std::uint32_t number,
                             std::shared_ptr<SoftCompletionQueue> send_cq,
                             std::shared_ptr<SoftCompletionQueue> recv_cq,
                             std::shared_ptr<const PeerView> peer, Mapping link, int side, UniqueFd socket,
                             std::string address)
    : Connection(number, send_cq, recv_cq),
      context_(std::move(context)),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)),
      peer_(std::move(peer)),
      link_(std::move(link)),
      side_(side),
      socket_(std::move(socket)),
      address_(std::move(address)) {}

ShmConnection::~ShmConnection() { close(); }

PeerInfo ShmConnection::peer() const { return PeerInfo{peer_->name, peer_->id, peer_->epoch, address_}; }

ConnectionStats ShmConnection::stats() const {
  std::lock_guard lock(mutex_);
  ConnectionStats s;
  s.connection = number();
  s.peer = peer_->name + " (pid " + std::to_string(peer_->pid) + ")";
  s.posted = posted_;
  s.completed = completed_;
  s.outstanding = pending_.size() + receives_.size();
  s.last_completion = last_completion_;
  s.failed = broken_;
  s.failure = failure_;
  return s;
}

Result<void> ShmConnection::health() const {
  std::lock_guard lock(mutex_);
  if (broken_) return fail(Errc::ConnectionBroken, failure_);
  return {};
}

void ShmConnection::close() {
  context_->detach(this);  // the progress thread no longer looks at us after this
  std::lock_guard lock(mutex_);
  if (closed_) return;
  closed_ = true;
  enter_error("connection closed", Status::Flushed);
  // The peer sees EOF at once and fails what it has pending with us.
  ::shutdown(socket_.get(), SHUT_RDWR);
}

void ShmConnection::peer_gone() {
  std::lock_guard lock(mutex_);
  peer_gone_locked();
}

void ShmConnection::peer_gone_locked() {
  gone_.store(true, std::memory_order_release);
  enter_error(
      "shm peer " + peer_->name + " (pid " + std::to_string(peer_->pid) + ") closed the connection or died",
      Status::TransportRetryExceeded);
}

bool ShmConnection::pins(std::uint32_t key) const noexcept {
  bool held = !gone() && in().pin.load(std::memory_order_seq_cst) == key;
  tsan::acquire_from_peer();  // the initiator's accesses under the pin happen before its release
  return held;
}

void ShmConnection::push(SoftCompletionQueue& cq, const Completion& completion) {
  ++completed_;
  last_completion_ = coarse_wall_clock();
  cq.push(completion);
}

void ShmConnection::finish(const Pending& op, const Outcome& outcome) {
  bool ok = outcome.status == Status::Success;
  if (ok && !op.request.signaled) {
    ++completed_;
    last_completion_ = coarse_wall_clock();
  } else {
    push(*send_cq_, Completion{.id = op.id,
                               .status = outcome.status,
                               .opcode = op.request.opcode,
                               .bytes = outcome.bytes,
                               .connection = number()});
  }
  if (!ok)
    enter_error(
        std::string(to_string(op.request.opcode)) + " failed: " + std::string(to_string(outcome.status)),
        Status::Flushed);
}

// The error state of a QP: nothing more is carried out; everything pending completes with
// `pending_status` (Flushed, or TransportRetryExceeded when the peer went away).
void ShmConnection::enter_error(std::string why, Status pending_status) {
  if (broken_) return;
  broken_ = true;
  failure_ = std::move(why);
  close_inbound();
  while (!pending_.empty()) {
    Pending op = pending_.front();
    pending_.pop_front();
    push(*send_cq_,
         Completion{
             .id = op.id, .status = pending_status, .opcode = op.request.opcode, .connection = number()});
  }
}

// Stops the peer from delivering into our receives, takes what it already delivered, flushes the rest.
void ShmConnection::close_inbound() {
  Inbound& inbound = in();
  inbound.closed.store(1, std::memory_order_seq_cst);
  // A delivery that saw `closed` still 0 is finishing: let it, so its completion is not lost. Bounded: a
  // stopped peer cannot hold us past the timeout.
  auto deadline = Clock::now() + context_->config().timeout;
  while (inbound.pin.load(std::memory_order_seq_cst) == kDeliveringPin && !gone() && Clock::now() < deadline)
    std::this_thread::yield();
  reap();
  while (!receives_.empty()) {
    std::uint64_t id = receives_.front().id;
    receives_.pop_front();
    push(*recv_cq_,
         Completion{.id = id, .status = Status::Flushed, .opcode = Opcode::Recv, .connection = number()});
  }
}

}  // namespace rdmakit::shm
