// Data path of a tcp connection, engine thread: reading frames, carrying out the peer's requests on
// registered memory (keys, bounds and rights checked before a byte is touched) and completing our own
// requests as their responses arrive.
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/clock.hpp"
#include "core/tsan.hpp"
#include "transport/tcp/connection.hpp"

namespace rdmakit::tcp {
namespace {

constexpr std::size_t kDiscardChunk = 64 * 1024;
// Read-ahead: a frame header is read with up to this many bytes of what follows it.
constexpr std::size_t kReadAhead = 16 * 1024;

// Fills iov with the first `length` bytes of `sgl`; returns the number of entries.
std::uint32_t sgl_to_iov(const SgList& sgl, std::uint64_t length, iovec* iov) {
  std::uint32_t count = 0;
  for (std::uint32_t i = 0; i < sgl.count && length > 0; ++i) {
    std::uint64_t take = std::min<std::uint64_t>(length, sgl.segments[i].length);
    if (take == 0) continue;
    iov[count++] = iovec{reinterpret_cast<void*>(sgl.segments[i].addr), take};
    length -= take;
  }
  return count;
}

}  // namespace

// A round reads at most this many times from one socket (each read is a frame header or a payload of up to
// the socket buffer): a peer that floods its connection with small frames then gets its share of the engine
// instead of all of it (one such peer gave others a 153 ms tail before).
constexpr int kReadsPerRound = 64;

bool TcpConnection::on_readable() { return drain_input(); }

void TcpConnection::poll_input(std::int64_t now_ns) {
  // Also when nothing of ours is outstanding: the peer's one-sided requests are carried out by whoever
  // reads, and a spinning poller must not leave them to an engine thread it keeps off the core.
  if (rc().failed()) return;
  // Input left over (our round's share was used up) goes to the engine at once: the poller may not call
  // again, and the lease may already be back with the engine, whose own read of this edge found
  // rx_mutex_ taken and left it to us (drain_input). Waiting for the poller's next call lost that input
  // until new bytes arrived: a bidirectional read_bw over tcp hung with the peer's READ requests read
  // ahead but never served.
  if (drain_input(AckTiming::MayRide, now_ns)) engine_.kick(engine_key_);
}

// Reads in whichever thread gets rx_mutex_. The engine watches the socket edge-triggered, so input must
// never be left behind unnoticed: a thread that finds the lock taken raises rx_pending_, and the holder
// reads again after letting go of the lock; a holder that stops because its round is used up says so
// (returns true) and is called again.
bool TcpConnection::drain_input(AckTiming timing, std::int64_t now_ns) {
  rx_pending_.store(true, std::memory_order_release);
  while (rx_pending_.load(std::memory_order_acquire)) {
    std::unique_lock rx_lock(rx_mutex_, std::try_to_lock);
    if (!rx_lock.owns_lock()) return false;
    rx_pending_.store(false, std::memory_order_release);
    rx_ack_timing_ = timing;
    socket_drained_ = false;
    round_read_request_ = false;
    int reads = kReadsPerRound;
    bool more = false;
    while (read_some()) {
      if (--reads == 0) {
        more = true;
        break;
      }
    }
    {
      // The burst (or our share of it) is over: one cumulative ACK answers every WRITE and SEND it carried.
      std::lock_guard lock(mutex_);
      if (timing == AckTiming::AtOnce)
        flush_ack_locked();
      else
        settle_ack_locked(now_ns);
    }
    abandon_receive_locked();
    if (more) return true;
  }
  return false;
}

bool TcpConnection::mid_frame() const noexcept {
  return rx_.phase == Receive::Phase::Payload || rx_.phase == Receive::Phase::Discard ||
         (rx_.phase == Receive::Phase::Header && rx_.header_bytes > 0);
}

// One step of the receive state machine. Bytes come from the read-ahead buffer while it holds any; only
// an empty buffer reads the socket: a frame header with as much of what follows as fits in the buffer (so
// an 8-byte WRITE or SEND is one system call, not two: strace), or a payload straight into its
// destination with the buffer behind it for the next frame's header.
bool TcpConnection::read_some() {
  if (rx_.phase == Receive::Phase::RnrWait) {
    {
      std::lock_guard lock(mutex_);
      if (recvs_.empty() || rc().failed()) return false;
      waiting_for_recv_.store(false);
      input_paused_ = false;
      update_interest_locked();
      rx_.phase = Receive::Phase::Header;
    }
    on_request_header();  // now with a receive to consume
    return true;
  }
  // Too many of our responses wait for the peer to read them: take no new request until it does.
  // (Whatever the buffer holds waits too: resume_responder_locked() has the engine read again.)
  if (rx_.phase == Receive::Phase::Header && rx_.header_bytes == 0 &&
      responder_full_.load(std::memory_order_relaxed))
    return false;
  if (ahead_.begin == ahead_.end) {
    // A poller whose last read came back short has emptied the socket (epoll(7)). When that read brought
    // the peer's requests (a ping-pong: the peer waits for our answer), the poller stops here and reads
    // again on its next poll: the read that would only say EAGAIN was a system call per message (send_lat
    // and write_lat 8 B: 3.10 vs 3.35 us). Not for responses and ACKs alone: an initiator streaming
    // WRITEs that reacted to each ACK that much sooner sent smaller batches, and a 4 KiB write_bw fell
    // into the mode where the target wakes per packet (1.7 instead of 5.5 GB/s) in 6 of 8 runs, not 3.
    // The engine reads on until EAGAIN: a stream's next bytes often arrive meanwhile.
    if (socket_drained_ && round_read_request_ && rx_ack_timing_ == AckTiming::MayRide) return false;
    if (!read_socket()) return false;
  } else {
    take_ahead();
  }
  return !rc().failed() || rx_.phase != Receive::Phase::Header;
}

// The read-ahead buffer is empty: reads the socket. False when it has nothing now (or is gone).
bool TcpConnection::read_socket() {
  if (ahead_.bytes.empty()) ahead_.bytes.resize(kReadAhead);
  ssize_t n = 0;
  std::size_t asked = 0;
  switch (rx_.phase) {
    case Receive::Phase::Header:
      asked = ahead_.bytes.size();
      n = ::recv(socket_.get(), ahead_.bytes.data(), asked, MSG_DONTWAIT);
      break;
    case Receive::Phase::Payload: {
      // The rest of the payload, then the buffer: the next frame's header comes in the same call.
      std::array<iovec, kMaxSge + 1> iov;
      std::uint32_t count = 0;
      for (std::uint32_t i = rx_.iov_next; i < rx_.iov_count; ++i) iov[count++] = rx_.iov[i];
      iov[count++] = iovec{ahead_.bytes.data(), ahead_.bytes.size()};
      for (std::uint32_t i = 0; i < count; ++i) asked += iov[i].iov_len;
      msghdr message{};
      message.msg_iov = iov.data();
      message.msg_iovlen = count;
      n = ::recvmsg(socket_.get(), &message, MSG_DONTWAIT);
      break;
    }
    case Receive::Phase::Discard:
      if (discard_buffer_.empty()) discard_buffer_.resize(kDiscardChunk);
      asked = std::min<std::uint64_t>(rx_.discard_left, kDiscardChunk);
      n = ::recv(socket_.get(), discard_buffer_.data(), asked, MSG_DONTWAIT);
      break;
    case Receive::Phase::RnrWait:
      return false;
  }
  if (n == 0) {
    peer_gone("closed the connection");
    return false;
  }
  if (n < 0) {
    if (errno == EINTR) return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK) peer_gone(std::string("failed: ") + std::strerror(errno));
    return false;
  }
  tsan::acquire_from_peer();
  touch_receive();
  auto got = static_cast<std::size_t>(n);
  socket_drained_ = got < asked;
  switch (rx_.phase) {
    case Receive::Phase::Header:
      ahead_.begin = 0;
      ahead_.end = got;
      take_ahead();
      break;
    case Receive::Phase::Payload: {
      std::size_t payload = advance_payload(got);
      ahead_.begin = 0;
      ahead_.end = got - payload;  // what landed in the buffer behind the payload
      if (rx_.iov_next == rx_.iov_count) finish_payload();
      break;
    }
    case Receive::Phase::Discard:
      rx_.discard_left -= got;
      if (rx_.discard_left == 0) finish_payload();
      break;
    case Receive::Phase::RnrWait:
      break;
  }
  return true;
}

// Moves the payload's iovecs past `got` bytes (at most what is left of it); returns how many it took.
std::size_t TcpConnection::advance_payload(std::size_t got) {
  std::size_t taken = 0;
  while (got > 0 && rx_.iov_next < rx_.iov_count) {
    iovec& part = rx_.iov[rx_.iov_next];
    std::size_t take = std::min(got, part.iov_len);
    part.iov_base = static_cast<char*>(part.iov_base) + take;
    part.iov_len -= take;
    got -= take;
    taken += take;
    if (part.iov_len == 0) ++rx_.iov_next;
  }
  return taken;
}

// One step from the read-ahead buffer: the header, the payload or the discarded bytes it holds.
void TcpConnection::take_ahead() {
  const std::byte* from = ahead_.bytes.data() + ahead_.begin;
  std::size_t have = ahead_.end - ahead_.begin;
  switch (rx_.phase) {
    case Receive::Phase::Header: {
      std::size_t take = std::min(have, sizeof(FrameHeader) - rx_.header_bytes);
      std::memcpy(reinterpret_cast<std::byte*>(&rx_.header) + rx_.header_bytes, from, take);
      ahead_.begin += take;
      rx_.header_bytes += take;
      if (rx_.header_bytes == sizeof(FrameHeader)) {
        rx_.header_bytes = 0;
        dispatch_header();
      }
      break;
    }
    case Receive::Phase::Payload: {
      std::size_t done = 0;
      while (done < have && rx_.iov_next < rx_.iov_count) {
        iovec& part = rx_.iov[rx_.iov_next];
        std::size_t take = std::min(have - done, part.iov_len);
        std::memcpy(part.iov_base, from + done, take);
        done += take;
        advance_payload(take);
      }
      ahead_.begin += done;
      if (rx_.iov_next == rx_.iov_count) finish_payload();
      break;
    }
    case Receive::Phase::Discard: {
      std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(have, rx_.discard_left));
      ahead_.begin += take;
      rx_.discard_left -= take;
      if (rx_.discard_left == 0) finish_payload();
      break;
    }
    case Receive::Phase::RnrWait:
      break;
  }
  if (ahead_.begin == ahead_.end) ahead_.begin = ahead_.end = 0;
}

void TcpConnection::dispatch_header() {
  if (auto ok = check_frame_header(rx_.header); !ok)
    return fail_now(Status::GeneralError,
                    Error(Errc::ProtocolError, "peer " + peer_label_ + " sent " + ok.error().message()));
  if (is_request(rx_.header.type)) {
    round_read_request_ = true;
    // Once per frame (on_request_header runs again for a request that waited for a receive).
    if (rx_.header.flags & kFrameAcks) on_ack_riding_on_request(rx_.header.operand2);
    return on_request_header();
  }
  on_response_header();
}

void TcpConnection::start_payload(const iovec* iov, std::uint32_t count) {
  std::copy(iov, iov + count, rx_.iov.begin());
  rx_.iov_count = count;
  rx_.iov_next = 0;
  rx_.phase = Receive::Phase::Payload;
  if (count == 0) finish_payload();
}

void TcpConnection::start_discard(std::uint64_t bytes) {
  rx_.discard_left = bytes;
  rx_.phase = Receive::Phase::Discard;
  if (bytes == 0) finish_payload();
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
      return start_payload(&target, h.length > 0 ? 1 : 0);
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
      return start_payload(iov, sgl_to_iov(rx_.recv.sgl, h.length, iov));
    }
    case FrameType::Read:
      return execute_read();
    default:
      return execute_atomic();
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
  send_response_locked(h, FrameType::ReadResponse, 0, h.length, &source, std::move(pin));
}

void TcpConnection::execute_atomic() {
  const FrameHeader& h = rx_.header;
  RegistrationTable::Pin pin;
  Status status = h.addr % 8 != 0 ? Status::RemoteInvalidRequest
                                  : table_.check_remote(h.rkey, h.addr, 8, Access::RemoteAtomic, &pin);
  std::uint64_t old = 0;
  if (status == Status::Success) {
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
  rx_.pin = {};
  const FrameHeader& h = rx_.header;
  std::lock_guard lock(mutex_);
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
    case Receive::Then::ReadDone: {
      if (in_flight_.empty()) return;  // failed meanwhile
      InFlight op = in_flight_.front();
      in_flight_.pop_front();
      complete_locked(op, Status::Success, op.bytes);
      return complete_local_errors_locked();
    }
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
      std::memcpy(reinterpret_cast<void*>(op.results.segments[0].addr), &h.operand1, 8);
      break;
    case FrameType::ReadResponse: {
      if (op.opcode != Opcode::Read || h.length != op.bytes)
        return protocol_error("a READ response that does not match the READ");
      rx_.then = Receive::Then::ReadDone;
      iovec iov[kMaxSge];
      std::uint32_t count = sgl_to_iov(op.results, h.length, iov);
      lock.unlock();
      return start_payload(iov, count);
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

}  // namespace rdmakit::tcp

namespace rdmakit::tcp {

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

}  // namespace rdmakit::tcp
