// The byte stream of a tcp connection: frames out of the queue into the socket (gathered from registered
// memory, as much as the socket takes), and bytes in through the receive state machine (frame headers with
// read-ahead, payloads straight into their destination, discarded payloads), read by the engine thread or
// by a thread polling a completion queue (lease.cpp); each complete header goes to the initiator
// (initiator.cpp: responses, ACKs) or the responder (responder.cpp: the peer's requests).
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/tsan.hpp"
#include "transport/tcp/connection.hpp"
#include "transport/tcp/context.hpp"

namespace rdmakit::tcp {
namespace {

constexpr std::size_t kDiscardChunk = 64 * 1024;
// Read-ahead: a frame header is read with up to this many bytes of what follows it.
constexpr std::size_t kReadAhead = 16 * 1024;

}  // namespace

// A round reads at most this many times from one socket (each read is a frame header or a payload of up to
// the socket buffer): a peer that floods its connection with small frames then gets its share of the engine
// instead of all of it (one such peer gave others a 153 ms tail before).
constexpr int kReadsPerRound = 64;

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
        if (!frame.staging.empty()) frame.staging.reset();
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

void TcpConnection::update_interest_locked() {
  if (!shut_down_)
    engine_.set_interest(engine_key_, socket_.get(),
                         !input_paused_ && !responder_full_.load(std::memory_order_relaxed) &&
                             !input_leased_.load(std::memory_order_relaxed),
                         want_output_);
}

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
      if (rx_.iov_next == rx_.iov_count) payload_part_done();
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
      if (rx_.iov_next == rx_.iov_count) payload_part_done();
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

void TcpConnection::start_payload_staged(const iovec* iov, std::uint32_t count, bool device) {
  rx_.staged = false;
  if (!device || count == 0) return start_payload(iov, count);
  if (!rx_.inbound) rx_.inbound = std::make_unique<detail::DeviceInbound>(context_->device_slots());
  rx_.inbound->begin({iov, count}, "tcp: staged payload to device memory");
  rx_.staged = true;
  start_next_chunk();
}

void TcpConnection::start_next_chunk() {
  if (rx_.inbound->unassigned() == 0) return start_payload(nullptr, 0);  // an empty payload
  iovec chunk = rx_.inbound->next_chunk();
  start_payload(&chunk, 1);
}

void TcpConnection::payload_part_done() {
  if (rx_.staged) {
    rx_.inbound->chunk_filled();
    if (rx_.inbound->unassigned() > 0) return start_next_chunk();
  }
  finish_payload();
}

Result<void> TcpConnection::land_staged() {
  if (!rx_.staged) return {};
  rx_.staged = false;
  return rx_.inbound->finish();
}

void TcpConnection::start_discard(std::uint64_t bytes) {
  rx_.staged = false;
  rx_.discard_left = bytes;
  rx_.phase = Receive::Phase::Discard;
  if (bytes == 0) finish_payload();
}

}  // namespace rdmakit::tcp
