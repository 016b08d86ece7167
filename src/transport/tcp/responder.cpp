// Serving the peer's requests: WRITEs landing in registered memory, SENDs consuming our posted receives
// (waiting for one while the receiver is not ready), READ responses and atomics (keys, bounds and rights
// checked before a byte is touched), and what the responder sends back: responses and NAKs in request
// order, within the responder depth, and cumulative ACKs, delayed to ride on our requests when they can.
#include <atomic>

#include "core/clock.hpp"
#include "core/rc_state.hpp"
#include "core/staged_copy.hpp"
#include "transport/tcp/connection.hpp"
#include "transport/tcp/context.hpp"

namespace rdmakit::tcp {

// Under mutex_, after the RC prologue (ConnectionProvider::run_post_recv). A posted receive is for the
// peer's SENDs and WRITE_IMMs (on_request_header): a request waiting for one (RnrWait) is read again.
Result<std::uint64_t> TcpConnection::post_recv_admitted(std::span<const Segment> sgl, std::uint64_t sequence,
                                                        std::unique_lock<std::mutex>&) {
  PostedRecv& recv = recvs_.push_back_slot();  // every field assigned: no copy of a zeroed list
  recv.id = rc().recv_id(sequence);
  recv.sgl.count = static_cast<std::uint32_t>(sgl.size());
  std::copy(sgl.begin(), sgl.end(), recv.sgl.segments.begin());
  recv.local_error = Status::Success;
  recv.on_device = false;
  for (const Segment& segment : sgl) {
    bool device = false;
    if (table_.check_local(segment, true, &device) != Status::Success)
      recv.local_error = Status::LocalProtection;
    recv.on_device = recv.on_device || device;
  }
  const std::uint64_t id = recv.id;
  if (waiting_for_recv_.load()) engine_.kick(engine_key_);
  return id;
}

void TcpConnection::on_request_header() {
  const FrameHeader& h = rx_.header;
  if (rc().failed()) {
    rx_.then = Receive::Then::Nothing;
    return start_discard(carries_request_payload(h.type) ? h.length : 0);
  }
  rx_.has_recv = false;
  switch (h.type) {
    case FrameType::Write:
    case FrameType::WriteImm: {
      if (h.type == FrameType::WriteImm && !try_consume_recv()) return;
      Status status = table_.check_remote(h.rkey, h.addr, h.length, Access::RemoteWrite, &rx_.pin);
      if (status != Status::Success) {
        rx_.then = Receive::Then::Nak;
        rx_.nak_status = status;
        rx_.recv_status = Status::Flushed;
        return start_discard(h.length);
      }
      rx_.then = h.type == FrameType::WriteImm ? Receive::Then::AckWriteImm : Receive::Then::Ack;
      iovec target{reinterpret_cast<void*>(h.addr), h.length};
      return start_payload_staged(&target, h.length > 0 ? 1 : 0, rx_.pin.device());
    }
    case FrameType::Send:
    case FrameType::SendImm: {
      if (!try_consume_recv()) return;
      if (rx_.recv.local_error != Status::Success || h.length > rx_.recv.sgl.total()) {
        // verbs: the receiver sees a local error, the sender a remote one.
        bool too_long = rx_.recv.local_error == Status::Success;
        rx_.then = Receive::Then::Nak;
        rx_.recv_status = too_long ? Status::LocalLength : rx_.recv.local_error;
        rx_.nak_status = too_long ? Status::RemoteInvalidRequest : Status::RemoteOperation;
        return start_discard(h.length);
      }
      rx_.then = Receive::Then::AckSend;
      iovec iov[kMaxSge];
      return start_payload_staged(iov, sgl_to_iov(rx_.recv.sgl, h.length, iov), rx_.recv.on_device);
    }
    case FrameType::Read:
      return execute_read();
    default:
      return execute_atomic();
  }
}

bool TcpConnection::try_consume_recv() {
  std::lock_guard lock(mutex_);
  if (recvs_.empty()) {
    // Receiver not ready: hold the request (stop reading) until a receive is posted or rnr_timeout passes.
    rx_.phase = Receive::Phase::RnrWait;
    rx_.rnr_deadline_ns = steady_ns() + rnr_timeout_ns_;
    input_paused_ = true;
    waiting_for_recv_.store(true);
    update_interest_locked();
    return false;
  }
  rx_.recv = recvs_.front();
  recvs_.pop_front();
  rx_.has_recv = true;
  return true;
}

// Receiver not ready for too long (on_tick): refuse the request; the initiator fails it with RNR retry
// exceeded. Needs rx_mutex_ and mutex_.
void TcpConnection::refuse_rnr_locked() {
  waiting_for_recv_.store(false);
  input_paused_ = false;
  update_interest_locked();
  rx_.nak_status = Status::RnrRetryExceeded;
  rx_.then = Receive::Then::Nak;
  rx_.has_recv = false;
  if (carries_request_payload(rx_.header.type) && rx_.header.length > 0) {
    rx_.phase = Receive::Phase::Discard;
    rx_.discard_left = rx_.header.length;
    // The payload may already be in the read-ahead buffer, which raises no edge: have the engine read.
    engine_.kick(engine_key_);
  } else {
    rx_.phase = Receive::Phase::Header;
    send_nak_locked(rx_.header, Status::RnrRetryExceeded);
    fail_locked(Status::Flushed,
                Error(Errc::ConnectionBroken, "refused a request: no receive was posted in time"),
                /*drain_output=*/true);
  }
}

void TcpConnection::execute_read() {
  const FrameHeader& h = rx_.header;
  RegistrationTable::Pin pin;
  Status status = table_.check_remote(h.rkey, h.addr, h.length, Access::RemoteRead, &pin);
  std::lock_guard lock(mutex_);
  if (status != Status::Success) {
    send_nak_locked(h, status);
    fail_locked(Status::Flushed,
                Error(Errc::ConnectionBroken, "refused a READ from the peer: remote access error"), true);
    return;
  }
  iovec source{reinterpret_cast<void*>(h.addr), h.length};
  if (!pin.device())
    return send_response_locked(h, FrameType::ReadResponse, 0, h.length, &source, std::move(pin));
  // The staged path: the bytes leave from pinned host memory, copied out of the device region while it is
  // pinned.
  auto staging = detail::stage_from_device(context_->device_slots(), std::span(&source, 1),
                                           "tcp: READ of device memory");
  if (!staging) {
    send_nak_locked(h, Status::RemoteOperation);
    fail_locked(Status::Flushed, staging.error(), true);
    return;
  }
  source.iov_base = staging->data();
  send_response_locked(h, FrameType::ReadResponse, 0, h.length, &source, std::move(pin), std::move(*staging));
}

Result<std::uint64_t> TcpConnection::device_atomic(const FrameHeader& h) {
  return detail::device_word_atomic(reinterpret_cast<void*>(h.addr), h.type == FrameType::CompareSwap,
                                    h.operand1, h.operand2, "tcp: atomic on device memory");
}

void TcpConnection::execute_atomic() {
  const FrameHeader& h = rx_.header;
  RegistrationTable::Pin pin;
  Status status = h.addr % 8 != 0 ? Status::RemoteInvalidRequest
                                  : table_.check_remote(h.rkey, h.addr, 8, Access::RemoteAtomic, &pin);
  std::uint64_t old = 0;
  if (status == Status::Success && pin.device()) {
    auto done = device_atomic(h);
    if (done)
      old = *done;
    else
      status = Status::RemoteOperation;
  } else if (status == Status::Success) {
    // Many connections (and the owner's own CPU) may hit this word at once: a real atomic.
    std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(h.addr));
    if (h.type == FrameType::CompareSwap) {
      old = h.operand1;
      word.compare_exchange_strong(old, h.operand2);
    } else {
      old = word.fetch_add(h.operand1);
    }
  }
  std::lock_guard lock(mutex_);
  if (status != Status::Success) {
    send_nak_locked(h, status);
    fail_locked(Status::Flushed, Error(Errc::ConnectionBroken, "refused an atomic from the peer"), true);
    return;
  }
  send_response_locked(h, FrameType::AtomicResponse, old, 0, nullptr, {});
}

void TcpConnection::finish_payload() {
  rx_.phase = Receive::Phase::Header;
  Result<void> landed = land_staged();  // before the pin goes: the device region stays registered meanwhile
  rx_.pin = {};
  const FrameHeader& h = rx_.header;
  std::lock_guard lock(mutex_);
  if (!landed) {
    // Our READ's result could not reach its device memory: the READ fails here. A peer's WRITE or SEND
    // could not: refused as if the memory were unreachable, and the receive it consumed fails.
    if (rx_.then == Receive::Then::ReadDone) return fail_locked(Status::LocalProtection, landed.error());
    if (rx_.then != Receive::Then::Nothing && rx_.then != Receive::Then::Nak) {
      rx_.then = Receive::Then::Nak;
      rx_.nak_status = Status::RemoteOperation;
      rx_.recv_status = Status::LocalProtection;
    }
  }
  switch (rx_.then) {
    case Receive::Then::Nothing:
      return;
    case Receive::Then::Ack:
      defer_ack_locked(h.sequence);
      if (h.length > kAckRideMaxBytes) ack_at_once_ = true;
      return;
    case Receive::Then::AckWriteImm:
    case Receive::Then::AckSend: {
      bool write_imm = rx_.then == Receive::Then::AckWriteImm;
      // The ACK leaves before the receive completion is visible (once the application sees the message it
      // may close or exit, and the sender must not then time out on a message that was delivered), unless
      // a poller reads and we have been sending requests too: then the application will most likely answer
      // at once and the ACK rides on its answer (close() sends a deferred ACK; see "Delayed ACKs").
      defer_ack_locked(h.sequence);
      if (rx_ack_timing_ == AckTiming::AtOnce || !posted_since_ack_ || h.length > kAckRideMaxBytes)
        flush_ack_locked();
      rc().completed(rx_.recv.id);
      recv_queue_->push(Completion{.id = rx_.recv.id,
                                   .status = Status::Success,
                                   .opcode = write_imm ? Opcode::RecvWriteImm : Opcode::Recv,
                                   .has_imm = write_imm || h.type == FrameType::SendImm,
                                   .bytes = h.length,
                                   .imm = h.imm,
                                   .connection = number()});
      return;
    }
    case Receive::Then::ReadDone:
      return finish_read_response_locked();
    case Receive::Then::Nak: {
      // A receive that the request consumed fails with it, and its failure is this side's (as on verbs).
      Error why(Errc::ConnectionBroken,
                "refused a request from the peer: " + std::string(to_string(rx_.nak_status)));
      if (rx_.has_recv) {
        Completion failed{
            .id = rx_.recv.id, .status = rx_.recv_status, .opcode = Opcode::Recv, .connection = number()};
        rc().completed(failed);
        if (!failed.ok()) why = detail::completion_error(failed, "the peer's request was refused");
        // The failure is recorded before the completion is visible, so health() agrees with it.
        if (failed.status != Status::Flushed) rc().fail(why);
        recv_queue_->push(failed);
      }
      send_nak_locked(h, rx_.nak_status);
      fail_locked(Status::Flushed, std::move(why), /*drain_output=*/true);
      return;
    }
  }
}

void TcpConnection::send_response_locked(const FrameHeader& request, FrameType type, std::uint64_t value,
                                         std::uint32_t length, const iovec* payload,
                                         RegistrationTable::Pin pin, detail::PinnedBytes staging) {
  if (type != FrameType::Ack) flush_ack_locked();  // responses leave in request order
  ++responses_queued_;
  OutFrame& frame = out_.emplace_back();
  frame.header = FrameHeader{.type = type,
                             .status = 0,
                             .flags = 0,
                             .length = length,
                             .addr = 0,
                             .rkey = 0,
                             .imm = 0,
                             .operand1 = value,
                             .operand2 = 0,
                             .sequence = request.sequence};
  frame.iov[0] = iovec{&frame.header, sizeof(FrameHeader)};
  frame.iov_count = 1;
  if (payload && payload->iov_len > 0) frame.iov[frame.iov_count++] = *payload;
  frame.pin = std::move(pin);
  frame.staging = std::move(staging);  // the payload's iovec points into it (a move keeps the buffer)
  flush_locked();
  if (responses_queued_ > send_depth_ && !responder_full_.load(std::memory_order_relaxed))
    pause_responder_locked();
}

void TcpConnection::send_nak_locked(const FrameHeader& request, Status status) {
  flush_ack_locked();
  ++responses_queued_;
  OutFrame& frame = out_.emplace_back();
  frame.header = FrameHeader{.type = FrameType::Nak,
                             .status = static_cast<std::uint8_t>(status),
                             .flags = 0,
                             .length = 0,
                             .addr = 0,
                             .rkey = 0,
                             .imm = 0,
                             .operand1 = 0,
                             .operand2 = 0,
                             .sequence = request.sequence};
  frame.iov[0] = iovec{&frame.header, sizeof(FrameHeader)};
  frame.iov_count = 1;
  flush_locked();
  if (responses_queued_ > send_depth_ && !responder_full_.load(std::memory_order_relaxed))
    pause_responder_locked();
}

// Responder depth, as verbs' responder resources: a peer may have at most send_queue_depth of our responses
// waiting in our memory. Beyond that we stop reading its requests until it reads the responses.
void TcpConnection::pause_responder_locked() {
  responder_full_.store(true, std::memory_order_relaxed);
  ++responder_pauses_;
  update_interest_locked();
}

void TcpConnection::resume_responder_locked() {
  if (responses_queued_ > send_depth_ / 2 || rc().failed()) return;
  responder_full_.store(false, std::memory_order_relaxed);
  update_interest_locked();
  // Requests that arrived meanwhile raised no new edge: have the engine read them.
  engine_.kick(engine_key_);
}

// Target side. Requests complete in order, so "everything up to sequence N is done" answers a whole
// burst of WRITEs and SENDs with one frame. It goes out when the burst ends (the socket is empty), before
// any other response (responses stay in request order), and at least every kAckBatch requests.
// Target side. Requests complete in order, so "everything up to sequence N is done" answers a whole
// burst of WRITEs and SENDs with one frame. It goes out when the burst ends (the socket is empty), before
// any other response (responses stay in request order), and at least every kAckBatch requests.
void TcpConnection::defer_ack_locked(std::uint64_t sequence) {
  constexpr std::uint32_t kAckBatch = 64;
  ack_sequence_ = sequence;
  if (++acks_deferred_ >= kAckBatch) flush_ack_locked();
}

void TcpConnection::flush_ack_locked() {
  if (acks_deferred_ == 0 || rc().failed()) return;
  acks_deferred_ = 0;
  ack_delay_until_ns_ = 0;
  posted_since_ack_ = false;
  ack_at_once_ = false;
  ++ack_frames_;
  FrameHeader ack{};
  ack.sequence = ack_sequence_;
  send_response_locked(ack, FrameType::Ack, 0, 0, nullptr, {});
}

// Delayed ACKs. In a ping-pong each side's ACK used to be a frame of its own: a sendmsg on the target and
// a recv on the initiator per message, twice the system calls of the message itself (strace). When a
// thread polls (it reads the socket itself, so the application is active) and we have sent requests on
// this connection since our last ACK frame, the ACK of a burst waits up to kAckDelayNs for our next
// request and rides on it (kFrameAcks). Otherwise (the engine thread reads, a waiter goes to sleep, the
// traffic goes one way) it leaves at the end of the burst as before. A waiting ACK still goes out:
// - on the first poll after kAckDelayNs (settle_ack_locked), or after 64 requests (defer_ack_locked);
// - before any other response (send_response_locked), so responses stay in request order;
// - when the poller stops: its lease ends (1 ms at most, or at once when it sleeps) and the engine reads
//   with AckTiming::AtOnce; the engine's tick checks the delay too;
// - on close() and in the destructor.
// So an ACK is late by at most the lease; a peer whose window is full meanwhile waits that long at worst.
// Only the ACKs of small messages wait: above kAckRideMaxBytes the system call saved is small next to the
// payload, and waiting was measured to cost (8 B-64 KiB write_lat: 1.1-2x faster riding; 256 KiB 33 -> 55
// us, 1 MiB 150 -> 220 us: a reason we did not pin down; bench/RESULTS.md).
namespace {
constexpr std::int64_t kAckDelayNs = 20'000;
}  // namespace

void TcpConnection::settle_ack_locked(std::int64_t now_ns) {
  if (acks_deferred_ == 0) return;
  if (!posted_since_ack_ || ack_at_once_) return flush_ack_locked();
  if (ack_delay_until_ns_ == 0)
    ack_delay_until_ns_ = now_ns + kAckDelayNs;
  else if (now_ns >= ack_delay_until_ns_)
    flush_ack_locked();
}

void TcpConnection::attach_ack_locked(FrameHeader& request) {
  posted_since_ack_ = true;
  if (acks_deferred_ == 0 || rc().failed()) return;
  if (request.type == FrameType::CompareSwap) {
    // Its operand2 is taken: the ACK goes first as a frame of its own.
    flush_ack_locked();
    posted_since_ack_ = true;
    return;
  }
  request.flags |= kFrameAcks;
  request.operand2 = ack_sequence_;
  acks_deferred_ = 0;
  ack_delay_until_ns_ = 0;
  ack_at_once_ = false;
  ++acks_on_requests_;
}

}  // namespace rdmakit::tcp
