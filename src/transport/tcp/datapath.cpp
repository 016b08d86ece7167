// Data path of a tcp connection, initiator side: posting operations and pushing frames into the socket
// straight from registered memory.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/rc_state.hpp"
#include "core/tsan.hpp"
#include "transport/tcp/connection.hpp"

namespace rdmakit::tcp {
namespace {

bool writes_locally(Opcode opcode) {
  return opcode == Opcode::Read || opcode == Opcode::CompareSwap || opcode == Opcode::FetchAdd;
}

FrameType frame_type(const WorkRequest& request) {
  switch (request.opcode) {
    case Opcode::Write:
      return FrameType::Write;
    case Opcode::WriteImm:
      return FrameType::WriteImm;
    case Opcode::Read:
      return FrameType::Read;
    case Opcode::CompareSwap:
      return FrameType::CompareSwap;
    case Opcode::FetchAdd:
      return FrameType::FetchAdd;
    default:
      return request.with_imm ? FrameType::SendImm : FrameType::Send;
  }
}

}  // namespace

// Under mutex_, after the RC prologue (Connection::post). Behind an operation that failed at post
// (rc().failure_queued()), requests are queued and flush in order.
Result<std::uint64_t> TcpConnection::post_admitted(std::span<const WorkRequest> chain, std::uint64_t sequence,
                                                   std::unique_lock<std::mutex>& lock) {
  if (in_flight_.empty()) touch_receive();  // the silent-peer clock starts now, not at the last activity
  for (std::size_t i = 0; i < chain.size(); ++i) enqueue_locked(chain[i], rc().send_id(sequence + i));
  flush_locked();
  complete_local_errors_locked();
  lock.unlock();
  abandon_receive_if_failed();  // this post may have found the connection broken
  return rc().send_id(sequence);
}

// The operation and its frame are written straight into their ring slots, field by field: copying a
// whole InFlight (its scatter-gather list of results) and zeroing a whole OutFrame was a third of an
// 8-byte SEND's post (callgrind).
void TcpConnection::enqueue_locked(const WorkRequest& request, std::uint64_t id) {
  const std::uint64_t sequence = next_sequence_++;
  std::uint32_t bytes = 0;
  Status local_error = Status::Success;
  const bool queued_failure = rc().failure_queued();
  for (const Segment& segment : request.local) {
    bytes += segment.length;
    if (queued_failure) continue;
    if (table_.check_local(segment, writes_locally(request.opcode)) != Status::Success)
      local_error = Status::LocalProtection;
  }
  if (queued_failure) local_error = Status::Flushed;  // behind an op that failed at post
  if (local_error != Status::Success) {
    rc().queue_failure();
    remember_in_flight(request, id, sequence, bytes, local_error);
    return;
  }
  FrameHeader header{.type = frame_type(request),
                     .status = 0,
                     .flags = 0,
                     .length = bytes,
                     .addr = request.remote.addr,
                     .rkey = request.remote.rkey,
                     .imm = request.imm,
                     .operand1 = request.compare_add,
                     .operand2 = request.swap,
                     .sequence = sequence};
  attach_ack_locked(header);  // before the frame is queued: a CompareSwap may send the ACK first
  if (rc().in_error()) [[unlikely]] {
    // That ACK found the socket broken: fail_locked flushed what was in flight and will not run again, so
    // this request (and the rest of its chain) completes Flushed behind them here, or never would.
    rc().flush_posted(id, request.opcode, [&](const Completion& c) { send_queue_->push(c); });
    return;
  }
  OutFrame& frame = out_.push_back_slot();
  frame.header = header;
  frame.iov[0] = iovec{&frame.header, sizeof(FrameHeader)};
  frame.iov_count = 1;
  frame.iov_next = 0;
  frame.pin = {};  // empty already: flush_locked() unpins before it pops
  if (!writes_locally(request.opcode))
    for (const Segment& segment : request.local)
      if (segment.length > 0)
        frame.iov[frame.iov_count++] = iovec{reinterpret_cast<void*>(segment.addr), segment.length};
  remember_in_flight(request, id, sequence, bytes, Status::Success);
}

void TcpConnection::remember_in_flight(const WorkRequest& request, std::uint64_t id, std::uint64_t sequence,
                                       std::uint32_t bytes, Status local_error) {
  InFlight& op = in_flight_.push_back_slot();
  op.id = id;
  op.sequence = sequence;
  op.opcode = request.opcode;
  op.signaled = request.signaled;
  op.local_error = local_error;
  op.bytes = bytes;
  op.results.count = 0;
  if (local_error == Status::Success && writes_locally(request.opcode)) {
    op.results.count = static_cast<std::uint32_t>(request.local.size());
    std::copy(request.local.begin(), request.local.end(), op.results.segments.begin());
  }
}

// Under mutex_, after the RC prologue (Connection::post_recv).
Result<std::uint64_t> TcpConnection::post_recv_admitted(std::span<const Segment> sgl, std::uint64_t sequence,
                                                        std::unique_lock<std::mutex>&) {
  PostedRecv& recv = recvs_.push_back_slot();  // every field assigned: no copy of a zeroed list
  recv.id = rc().recv_id(sequence);
  recv.sgl.count = static_cast<std::uint32_t>(sgl.size());
  std::copy(sgl.begin(), sgl.end(), recv.sgl.segments.begin());
  recv.local_error = Status::Success;
  for (const Segment& segment : sgl)
    if (table_.check_local(segment, true) != Status::Success) recv.local_error = Status::LocalProtection;
  const std::uint64_t id = recv.id;
  if (waiting_for_recv_.load()) engine_.kick(engine_key_);
  return id;
}

void TcpConnection::flush_locked() {
  constexpr std::size_t kBatch = 64;
  while (!out_.empty() && !shut_down_) {
    iovec batch[kBatch];
    std::size_t count = 0;
    for (std::size_t f = 0; f < out_.size() && count < kBatch; ++f) {
      OutFrame& frame = out_[f];
      for (std::uint32_t i = frame.iov_next; i < frame.iov_count && count < kBatch; ++i)
        batch[count++] = frame.part(i);
    }
    msghdr message{};
    message.msg_iov = batch;
    message.msg_iovlen = count;
    tsan::release_to_peer();
    ssize_t sent = ::sendmsg(socket_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      int error = errno;
      linger_ = false;
      fail_locked(Status::TransportRetryExceeded,
                  Error(Errc::ConnectionBroken,
                        "sending to peer " + peer_label_ + " failed: " + std::strerror(error), error));
      return;
    }
    touch_send();
    auto left = static_cast<std::size_t>(sent);
    while (left > 0) {
      OutFrame& frame = out_.front();
      iovec& part = frame.iov[frame.iov_next];
      std::size_t take = std::min(left, part.iov_len);
      part.iov_base = static_cast<char*>(part.iov_base) + take;
      part.iov_len -= take;
      left -= take;
      if (part.iov_len == 0) ++frame.iov_next;
      if (frame.iov_next == frame.iov_count) {
        if (is_response(frame.header.type)) --responses_queued_;
        frame.pin = {};  // the ring keeps the slot: unpin the source now
        out_.pop_front();
      }
    }
  }
  bool want_output = !out_.empty();
  if (want_output != want_output_) {
    want_output_ = want_output;
    if (want_output) touch_send();  // the stall clock starts when we first wait for room
    update_interest_locked();
  }
  if (responder_full_.load(std::memory_order_relaxed)) resume_responder_locked();
  if (out_.empty() && linger_) {
    linger_ = false;
    shut_down_locked();
  }
}

void TcpConnection::on_writable() {
  {
    std::lock_guard lock(mutex_);
    flush_locked();
  }
  abandon_receive_if_failed();
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

void TcpConnection::send_response_locked(const FrameHeader& request, FrameType type, std::uint64_t value,
                                         std::uint32_t length, const iovec* payload,
                                         RegistrationTable::Pin pin) {
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

}  // namespace rdmakit::tcp
