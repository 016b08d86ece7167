// Data path of a tcp connection, initiator side: posting operations and pushing frames into the socket
// straight from registered memory.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/tsan.hpp"
#include "transport/tcp/connection.hpp"

namespace rdmakit::tcp {
namespace {

bool writes_locally(Opcode opcode) {
  return opcode == Opcode::Read || opcode == Opcode::CompareSwap || opcode == Opcode::FetchAdd;
}

FrameType frame_type(const WorkRequest& request) {
  switch (request.opcode) {
    case Opcode::Write: return FrameType::Write;
    case Opcode::WriteImm: return FrameType::WriteImm;
    case Opcode::Read: return FrameType::Read;
    case Opcode::CompareSwap: return FrameType::CompareSwap;
    case Opcode::FetchAdd: return FrameType::FetchAdd;
    default: return request.with_imm ? FrameType::SendImm : FrameType::Send;
  }
}

}  // namespace

Result<void> TcpConnection::validate(const WorkRequest& request) const {
  switch (request.opcode) {
    case Opcode::Recv:
    case Opcode::RecvWriteImm:
      return fail(Errc::InvalidArgument, "post: opcode " + std::string(to_string(request.opcode)) +
                                             " cannot be posted; use post_recv()");
    default: break;
  }
  if (request.local.size() > kMaxSge)
    return fail(Errc::InvalidArgument, "post: " + std::to_string(request.local.size()) +
                                           " scatter-gather entries, the tcp transport takes at most " +
                                           std::to_string(kMaxSge));
  std::uint64_t total = 0;
  for (const Segment& segment : request.local) total += segment.length;
  if (total > kMaxMessageSize)
    return fail(Errc::InvalidArgument, "post: message of " + std::to_string(total) + " bytes exceeds the maximum of " +
                                           std::to_string(kMaxMessageSize));
  bool atomic = request.opcode == Opcode::CompareSwap || request.opcode == Opcode::FetchAdd;
  if (atomic && (request.local.size() != 1 || request.local[0].length != 8))
    return fail(Errc::InvalidArgument, "post: an atomic needs exactly one 8-byte local segment for the old value");
  bool one_sided = request.opcode != Opcode::Send;
  if (one_sided && request.remote.owner_epoch != 0 && request.remote.owner_epoch != peer_.epoch)
    return fail(Errc::StaleDescriptor, "post: the remote address comes from a descriptor of epoch " +
                                           std::to_string(request.remote.owner_epoch) + ", but peer " + peer_label_ +
                                           " is at epoch " + std::to_string(peer_.epoch) +
                                           " (another process, or an earlier life of this one)");
  return {};
}

Result<std::uint64_t> TcpConnection::post(std::span<const WorkRequest> chain) {
  if (chain.empty()) return fail(Errc::InvalidArgument, "post: empty chain");
  for (const WorkRequest& request : chain)
    if (auto ok = validate(request); !ok) return std::unexpected(ok.error());
  std::uint64_t first;
  {
    std::lock_guard lock(mutex_);
    if (failure_) return fail(Errc::ConnectionBroken, "post: " + failure_->message());
    if (error_queued_) return fail(Errc::ConnectionBroken, "post: an earlier operation failed");
    if (in_flight_.size() + chain.size() > send_depth_)
      return fail(Errc::ResourceExhausted, "post: send queue full (" + std::to_string(send_depth_) +
                                               " outstanding; option send_queue_depth)");
    if (in_flight_.empty()) touch_receive();  // the silent-peer clock starts now, not at the last activity
    first = make_id(next_sequence_, false);
    for (const WorkRequest& request : chain) enqueue_locked(request, make_id(next_sequence_, false));
    posted_.fetch_add(chain.size(), std::memory_order_relaxed);
    flush_locked();
    complete_local_errors_locked();
  }
  abandon_receive_if_failed();  // this post may have found the connection broken
  return first;
}

void TcpConnection::enqueue_locked(const WorkRequest& request, std::uint64_t id) {
  InFlight op{.id = id, .sequence = next_sequence_++, .opcode = request.opcode, .signaled = request.signaled,
              .local_error = Status::Success, .bytes = 0, .results = {}};
  for (const Segment& segment : request.local) {
    op.bytes += segment.length;
    if (error_queued_) continue;
    if (table_.check_local(segment, writes_locally(request.opcode)) != Status::Success)
      op.local_error = Status::LocalProtection;
  }
  if (error_queued_) op.local_error = Status::Flushed;  // behind an op that failed at post
  if (op.local_error != Status::Success) {
    error_queued_ = true;
    in_flight_.push_back(op);
    return;
  }
  OutFrame& frame = out_.emplace_back();
  frame.header = FrameHeader{.type = frame_type(request), .status = 0, .reserved = 0, .length = op.bytes,
                             .addr = request.remote.addr, .rkey = request.remote.rkey, .imm = request.imm,
                             .operand1 = request.compare_add, .operand2 = request.swap, .sequence = op.sequence};
  frame.iov[0] = iovec{&frame.header, sizeof(FrameHeader)};
  frame.iov_count = 1;
  if (writes_locally(request.opcode)) {
    op.results.count = static_cast<std::uint32_t>(request.local.size());
    std::copy(request.local.begin(), request.local.end(), op.results.segments.begin());
  } else {
    for (const Segment& segment : request.local)
      if (segment.length > 0)
        frame.iov[frame.iov_count++] = iovec{reinterpret_cast<void*>(segment.addr), segment.length};
  }
  in_flight_.push_back(op);
}

Result<std::uint64_t> TcpConnection::post_recv(std::span<const Segment> sgl) {
  if (sgl.size() > kMaxSge)
    return fail(Errc::InvalidArgument, "post_recv: " + std::to_string(sgl.size()) +
                                           " scatter-gather entries, the tcp transport takes at most " +
                                           std::to_string(kMaxSge));
  std::lock_guard lock(mutex_);
  if (failure_) return fail(Errc::ConnectionBroken, "post_recv: " + failure_->message());
  if (recvs_.size() >= recv_depth_)
    return fail(Errc::ResourceExhausted, "post_recv: receive queue full (" + std::to_string(recv_depth_) +
                                             " posted; option recv_queue_depth)");
  PostedRecv recv{.id = make_id(next_recv_sequence_++, true), .sgl = {}, .local_error = Status::Success};
  recv.sgl.count = static_cast<std::uint32_t>(sgl.size());
  std::copy(sgl.begin(), sgl.end(), recv.sgl.segments.begin());
  for (const Segment& segment : sgl)
    if (table_.check_local(segment, true) != Status::Success) recv.local_error = Status::LocalProtection;
  recvs_.push_back(recv);
  posted_.fetch_add(1, std::memory_order_relaxed);
  if (waiting_for_recv_.load()) engine_.kick(engine_key_);
  return recv.id;
}

void TcpConnection::flush_locked() {
  constexpr std::size_t kBatch = 64;
  while (!out_.empty() && !shut_down_) {
    iovec batch[kBatch];
    std::size_t count = 0;
    for (auto it = out_.begin(); it != out_.end() && count < kBatch; ++it)
      for (std::uint32_t i = it->iov_next; i < it->iov_count && count < kBatch; ++i) batch[count++] = it->iov[i];
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
                  Error(Errc::ConnectionBroken, "sending to peer " + peer_label_ + " failed: " + std::strerror(error),
                        error));
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
  if (responses_queued_ > send_depth_ / 2 || failed_.load(std::memory_order_relaxed)) return;
  responder_full_.store(false, std::memory_order_relaxed);
  update_interest_locked();
  // Requests that arrived meanwhile raised no new edge: have the engine read them.
  engine_.kick(engine_key_);
}

void TcpConnection::send_response_locked(const FrameHeader& request, FrameType type, std::uint64_t value,
                                         std::uint32_t length, const iovec* payload, RegistrationTable::Pin pin) {
  if (type != FrameType::Ack) flush_ack_locked();  // responses leave in request order
  ++responses_queued_;
  OutFrame& frame = out_.emplace_back();
  frame.header = FrameHeader{.type = type, .status = 0, .reserved = 0, .length = length, .addr = 0, .rkey = 0,
                             .imm = 0, .operand1 = value, .operand2 = 0, .sequence = request.sequence};
  frame.iov[0] = iovec{&frame.header, sizeof(FrameHeader)};
  frame.iov_count = 1;
  if (payload && payload->iov_len > 0) frame.iov[frame.iov_count++] = *payload;
  frame.pin = std::move(pin);
  flush_locked();
  if (responses_queued_ > send_depth_ && !responder_full_.load(std::memory_order_relaxed)) pause_responder_locked();
}

void TcpConnection::send_nak_locked(const FrameHeader& request, Status status) {
  flush_ack_locked();
  ++responses_queued_;
  OutFrame& frame = out_.emplace_back();
  frame.header = FrameHeader{.type = FrameType::Nak, .status = static_cast<std::uint8_t>(status), .reserved = 0,
                             .length = 0, .addr = 0, .rkey = 0, .imm = 0, .operand1 = 0, .operand2 = 0,
                             .sequence = request.sequence};
  frame.iov[0] = iovec{&frame.header, sizeof(FrameHeader)};
  frame.iov_count = 1;
  flush_locked();
  if (responses_queued_ > send_depth_ && !responder_full_.load(std::memory_order_relaxed)) pause_responder_locked();
}

}  // namespace rdmakit::tcp
