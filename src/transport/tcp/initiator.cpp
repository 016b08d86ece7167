// Requests this side initiates, from post to completion: the post hook turns a chain into request frames
// (queued for stream.cpp to write straight from registered memory) and operations in flight; the peer's
// responses, NAKs and cumulative ACKs (on a frame of their own or riding on its requests) complete them, in
// order, into the send queue.
#include <cstring>

#include "core/log.hpp"
#include "core/rc_state.hpp"
#include "core/staged_copy.hpp"
#include "transport/tcp/connection.hpp"
#include "transport/tcp/context.hpp"

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

// Under mutex_, after the RC prologue (ConnectionProvider::run_post). Behind an operation that failed at post
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
  bool on_device = false;
  for (const Segment& segment : request.local) {
    bytes += segment.length;
    if (queued_failure) continue;
    bool device = false;
    if (table_.check_local(segment, writes_locally(request.opcode), &device) != Status::Success)
      local_error = Status::LocalProtection;
    on_device = on_device || device;
  }
  if (queued_failure) local_error = Status::Flushed;  // behind an op that failed at post
  // The staged path: a WRITE's or SEND's source in device memory is copied out now into a pinned buffer,
  // and the frame leaves from that copy (the CPU never reads device memory).
  detail::PinnedBytes staging;
  if (local_error == Status::Success && on_device && !writes_locally(request.opcode)) {
    std::array<iovec, kMaxSge> sources{};
    std::size_t count = 0;
    for (const Segment& segment : request.local)
      sources[count++] = iovec{reinterpret_cast<void*>(segment.addr), segment.length};
    auto copied = detail::stage_from_device(context_->device_slots(), std::span(sources.data(), count),
                                            "tcp: the source of a WRITE or SEND in device memory");
    if (copied) {
      staging = std::move(*copied);
    } else {
      log::warn("tcp", copied.error().message());
      local_error = Status::LocalProtection;
    }
  }
  if (local_error != Status::Success) {
    rc().queue_failure();
    remember_in_flight(request, id, sequence, bytes, local_error, on_device);
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
  frame.staging = std::move(staging);
  if (!frame.staging.empty())
    frame.iov[frame.iov_count++] = iovec{frame.staging.data(), frame.staging.size()};
  else if (!writes_locally(request.opcode))
    for (const Segment& segment : request.local)
      if (segment.length > 0)
        frame.iov[frame.iov_count++] = iovec{reinterpret_cast<void*>(segment.addr), segment.length};
  remember_in_flight(request, id, sequence, bytes, Status::Success, on_device);
}

void TcpConnection::remember_in_flight(const WorkRequest& request, std::uint64_t id, std::uint64_t sequence,
                                       std::uint32_t bytes, Status local_error, bool on_device) {
  InFlight& op = in_flight_.push_back_slot();
  op.id = id;
  op.sequence = sequence;
  op.opcode = request.opcode;
  op.signaled = request.signaled;
  op.local_error = local_error;
  op.bytes = bytes;
  op.results.count = 0;
  op.results_on_device = on_device && writes_locally(request.opcode);
  if (local_error == Status::Success && writes_locally(request.opcode)) {
    op.results.count = static_cast<std::uint32_t>(request.local.size());
    std::copy(request.local.begin(), request.local.end(), op.results.segments.begin());
  }
}

void TcpConnection::on_response_header() {
  const FrameHeader& h = rx_.header;
  std::unique_lock lock(mutex_);
  if (rc().failed()) {
    lock.unlock();
    rx_.then = Receive::Then::Nothing;
    return start_discard(h.type == FrameType::ReadResponse ? h.length : 0);
  }
  auto protocol_error = [&](const std::string& what) {
    fail_locked(Status::GeneralError,
                Error(Errc::ProtocolError, "peer " + peer_label_ + " broke the protocol: " + what));
  };
  if (h.type == FrameType::Ack) return on_cumulative_ack_locked(h.sequence);
  if (in_flight_.empty() || in_flight_.front().local_error != Status::Success)
    return protocol_error("a response with no request waiting for it");
  InFlight& op = in_flight_.front();
  if (h.sequence != op.sequence) return protocol_error("a response out of order");
  switch (h.type) {
    case FrameType::AtomicResponse:
      if (op.opcode != Opcode::CompareSwap && op.opcode != Opcode::FetchAdd)
        return protocol_error("an atomic response for a " + std::string(to_string(op.opcode)));
      if (!op.results_on_device) {
        std::memcpy(reinterpret_cast<void*>(op.results.segments[0].addr), &h.operand1, 8);
      } else if (auto landed =
                     detail::staged_copy(reinterpret_cast<void*>(op.results.segments[0].addr), &h.operand1, 8,
                                         "tcp: an atomic's result to device memory");
                 !landed) {
        return fail_locked(Status::LocalProtection, landed.error());
      }
      break;
    case FrameType::ReadResponse: {
      if (op.opcode != Opcode::Read || h.length != op.bytes)
        return protocol_error("a READ response that does not match the READ");
      rx_.then = Receive::Then::ReadDone;
      iovec iov[kMaxSge];
      std::uint32_t count = sgl_to_iov(op.results, h.length, iov);
      const bool staged = op.results_on_device;
      lock.unlock();
      return start_payload_staged(iov, count, staged);
    }
    case FrameType::Nak: {
      auto status = static_cast<Status>(h.status);
      if (h.status > static_cast<std::uint8_t>(Status::GeneralError) || status == Status::Success)
        return protocol_error("a NAK with an invalid status");
      return fail_locked(status, Error(Errc::TransportFailure,
                                       std::string(to_string(op.opcode)) + " failed at peer " + peer_label_ +
                                           ": " + std::string(to_string(status)),
                                       0, status));
    }
    default:
      return protocol_error("a request type in a response");
  }
  InFlight done = op;
  in_flight_.pop_front();
  complete_locked(
      done, Status::Success,
      done.opcode == Opcode::Read
          ? done.bytes
          : (done.opcode == Opcode::CompareSwap || done.opcode == Opcode::FetchAdd ? 8 : done.bytes));
  complete_local_errors_locked();
}

// The payload of a READ response is in the READ's destination (stream.cpp): the READ completes.
void TcpConnection::finish_read_response_locked() {
  if (in_flight_.empty()) return;  // failed meanwhile
  InFlight op = in_flight_.front();
  in_flight_.pop_front();
  complete_locked(op, Status::Success, op.bytes);
  complete_local_errors_locked();
}

void TcpConnection::on_ack_riding_on_request(std::uint64_t sequence) {
  std::lock_guard lock(mutex_);
  if (rc().failed()) return;
  on_cumulative_ack_locked(sequence);
}

// Initiator side: completes every WRITE, WRITE_IMM and SEND up to `sequence`. Checks everything a peer
// controls itself, whichever frame the ACK came in.
void TcpConnection::on_cumulative_ack_locked(std::uint64_t sequence) {
  if (in_flight_.empty() || in_flight_.front().local_error != Status::Success)
    return fail_locked(
        Status::GeneralError,
        Error(Errc::ProtocolError,
              "peer " + peer_label_ + " broke the protocol: an ACK with no request waiting for it"));
  if (sequence < in_flight_.front().sequence || sequence >= next_sequence_)
    return fail_locked(
        Status::GeneralError,
        Error(Errc::ProtocolError, "peer " + peer_label_ + " broke the protocol: an ACK out of range"));
  while (!in_flight_.empty() && in_flight_.front().sequence <= sequence) {
    InFlight done = in_flight_.front();
    if (done.local_error != Status::Success ||
        (done.opcode != Opcode::Write && done.opcode != Opcode::WriteImm && done.opcode != Opcode::Send))
      return fail_locked(
          Status::GeneralError,
          Error(Errc::ProtocolError, "peer " + peer_label_ + " broke the protocol: an ACK for a " +
                                         std::string(to_string(done.opcode))));
    in_flight_.pop_front();
    complete_locked(done, Status::Success, done.bytes);
  }
  complete_local_errors_locked();
}

void TcpConnection::complete_locked(const InFlight& op, Status status, std::uint32_t bytes) {
  rc().completed(op.id);
  if (status == Status::Success && !op.signaled) return;
  send_queue_->push(
      Completion{.id = op.id, .status = status, .opcode = op.opcode, .bytes = bytes, .connection = number()});
}

// Ops that failed at post complete once everything before them has: in order, as verbs would.
void TcpConnection::complete_local_errors_locked() {
  if (!in_flight_.empty() && in_flight_.front().local_error != Status::Success) {
    Status status = in_flight_.front().local_error;
    fail_locked(status, Error(Errc::TransportFailure,
                              "operation failed with " + std::string(to_string(status)), 0, status));
  }
}

}  // namespace rdmakit::tcp
