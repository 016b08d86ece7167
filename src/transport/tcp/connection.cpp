// Lifecycle and failure of a tcp connection: creation, close, health and statistics, the error state,
// the stall clocks and the engine's tick (silent peer, stalled frames, RNR and ACK deadlines).
#include "transport/tcp/connection.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>

#include "core/clock.hpp"
#include "core/log.hpp"
#include "core/rc_state.hpp"
#include "transport/tcp/completion_queue.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/socket.hpp"

namespace rdmakit::tcp {
namespace {

Result<std::shared_ptr<TcpCompletionQueue>> own_or_new_cq(const std::shared_ptr<CompletionQueue>& given,
                                                          const Config& config, std::uint32_t depth) {
  // A connection's own queue holds what its queue can have outstanding, as on verbs.
  if (!given) return std::make_shared<TcpCompletionQueue>(config.wait_mode, config.spin, depth);
  auto soft = std::dynamic_pointer_cast<TcpCompletionQueue>(given);
  if (!soft) return fail(Errc::InvalidArgument, "completion queue was not created by a tcp context");
  return soft;
}

}  // namespace

std::uint64_t SgList::total() const noexcept {
  std::uint64_t sum = 0;
  for (std::uint32_t i = 0; i < count; ++i) sum += segments[i].length;
  return sum;
}

Result<std::shared_ptr<TcpConnection>> TcpConnection::create(std::shared_ptr<TcpContext> context, Fd socket,
                                                             PeerInfo peer, const ConnectOptions& options) {
  auto send_cq = own_or_new_cq(options.send_cq, context->config(), context->config().send_queue_depth);
  if (!send_cq) return std::unexpected(send_cq.error());
  auto recv_cq = own_or_new_cq(options.recv_cq, context->config(), context->config().recv_queue_depth);
  if (!recv_cq) return std::unexpected(recv_cq.error());
  if (auto ok = make_data_socket(socket.get()); !ok) return std::unexpected(ok.error());
  std::uint32_t number = context->acquire_connection_number();
  std::uint64_t key = context->engine().new_key();
  auto connection = std::make_shared<TcpConnection>(number, key, context, std::move(socket), std::move(peer),
                                                    std::move(*send_cq), std::move(*recv_cq));
  if (auto ok = context->engine().add(key, connection->socket_.get(), connection); !ok)
    return std::unexpected(ok.error());
  std::static_pointer_cast<TcpCompletionQueue>(connection->send_queue_)->attach(connection);
  if (connection->recv_queue_ != connection->send_queue_)
    std::static_pointer_cast<TcpCompletionQueue>(connection->recv_queue_)->attach(connection);
  return connection;
}

TcpConnection::TcpConnection(std::uint32_t number, std::uint64_t engine_key,
                             std::shared_ptr<TcpContext> context, Fd socket, PeerInfo peer,
                             std::shared_ptr<SoftCompletionQueue> send_cq,
                             std::shared_ptr<SoftCompletionQueue> recv_cq)
    : ConnectionProvider(number, send_cq, recv_cq,
                         std::make_shared<detail::RcState>(number, context->config().send_queue_depth,
                                                           context->config().recv_queue_depth),
                         detail::Admission::Software, context->capabilities(), peer.epoch),
      context_(std::move(context)),
      table_(context_->table()),
      engine_(context_->engine()),
      socket_(std::move(socket)),
      peer_(std::move(peer)),
      peer_label_(log::printable(peer_.name) + " at " + peer_.address),
      engine_key_(engine_key),
      send_queue_(std::move(send_cq)),
      recv_queue_(std::move(recv_cq)),
      send_depth_(context_->config().send_queue_depth),
      recv_depth_(context_->config().recv_queue_depth),
      timeout_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(context_->config().timeout).count()),
      rnr_timeout_ns_(
          std::chrono::duration_cast<std::chrono::nanoseconds>(context_->config().rnr_timeout).count()) {
  // in_flight_ holds the requests behind one that failed at post too (they flush in order): they count.
  set_software_queues({in_flight_.size_address(), send_depth_, send_queue_.get()},
                      {recvs_.size_address(), recv_depth_, recv_queue_.get()});
  touch_receive();
  touch_send();
}

TcpConnection::~TcpConnection() {
  {
    std::lock_guard lock(mutex_);
    flush_ack_locked();  // a delayed ACK: the peer's requests were carried out
    fail_locked(Status::Flushed, Error(Errc::ConnectionBroken, "connection closed"));
    linger_ = false;
    shut_down_locked();
  }
  context_->release_connection_number(number());
}

void TcpConnection::close() {
  std::lock_guard rx_lock(rx_mutex_);
  std::lock_guard lock(mutex_);
  flush_ack_locked();  // a delayed ACK: the peer's requests were carried out
  rc().close();
  fail_locked(Status::Flushed, Error(Errc::ConnectionBroken, "connection closed by this side"));
  abandon_receive_locked();
}

void TcpConnection::touch_receive() noexcept {
  last_receive_ns_.store(steady_ns(), std::memory_order_relaxed);
}
void TcpConnection::touch_send() noexcept { last_send_ns_.store(steady_ns(), std::memory_order_relaxed); }

// A failed connection reads no further, so a WRITE it was receiving will never finish: the region it
// pinned must not wait for the connection object to be destroyed (the application may keep it).
void TcpConnection::abandon_receive_locked() {
  if (!rc().failed()) return;
  std::uint64_t left = 0;
  if (rx_.staged) {
    // The staged payload's device region may go with the pin: its queued copies run first, the rest of
    // it is discarded.
    left = rx_.inbound->unassigned();
    rx_.inbound->abandon();
    rx_.staged = false;
  }
  rx_.pin = {};
  if (rx_.phase != Receive::Phase::Payload) return;
  // A failed connection that still drains (a NAK lingering) reads the rest of this payload into scratch.
  for (std::uint32_t i = rx_.iov_next; i < rx_.iov_count; ++i) left += rx_.iov[i].iov_len;
  rx_.then = Receive::Then::Nothing;
  rx_.discard_left = left;
  rx_.phase = left > 0 ? Receive::Phase::Discard : Receive::Phase::Header;
}

void TcpConnection::abandon_receive_if_failed() {
  if (!rc().failed()) return;
  std::lock_guard rx_lock(rx_mutex_);
  abandon_receive_locked();
}

void TcpConnection::fail_locked(Status head_status, Error reason, bool drain_output) {
  if (rc().in_error()) return;
  if (head_status != Status::Flushed)
    log::debug("tcp", "connection " + std::to_string(number()) + " to " + peer_label_ +
                          " failed: " + reason.message());
  const auto opcode_of = [](const InFlight& op) { return op.opcode; };
  if (!rc().enter_error(std::move(reason), head_status, in_flight_, opcode_of,
                        [&](const Completion& c) { send_queue_->push(c); }))
    return;
  rc().flush_recvs(recvs_, [&](const Completion& c) { recv_queue_->push(c); });
  if (!drain_output) {
    out_.clear();
    responses_queued_ = 0;
  }
  linger_ = !out_.empty();
  if (!linger_) shut_down_locked();
}

void TcpConnection::fail_now(Status head_status, Error reason) {
  std::lock_guard lock(mutex_);
  fail_locked(head_status, std::move(reason));
}

void TcpConnection::peer_gone(const std::string& why) {
  std::lock_guard lock(mutex_);
  // After we sent a NAK the peer is expected to hang up; what is left here was flushed already.
  fail_locked(Status::TransportRetryExceeded,
              Error(Errc::ConnectionBroken, "peer " + peer_label_ + " " + why));
}

void TcpConnection::shut_down_locked() {
  if (shut_down_) return;
  shut_down_ = true;
  engine_.remove(engine_key_, socket_.get());
  ::shutdown(socket_.get(), SHUT_RDWR);
}

Result<void> TcpConnection::health() const { return rc().health(); }

ConnectionStats TcpConnection::stats() const {
  ConnectionStats stats = rc().stats(peer_);
  std::lock_guard lock(mutex_);
  // Responder side: responses to the peer's requests waiting for room in the socket, and how often input
  // was paused because they reached the responder depth (send_queue_depth), as a verbs responder limits
  // outstanding READs and atomics. ACKs of the peer's WRITEs and SENDs sent as frames of their own, and
  // those that rode on one of our requests instead (a delayed ACK: one system call less each way in a
  // ping-pong). docs/architecture.md describes them.
  stats.transport_counters = {{"queued_responses", responses_queued_},
                              {"responder_pauses", responder_pauses_},
                              {"ack_frames", ack_frames_},
                              {"acks_on_requests", acks_on_requests_}};
  return stats;
}

void TcpConnection::on_tick(std::int64_t now_ns) {
  std::lock_guard rx_lock(rx_mutex_);
  std::lock_guard lock(mutex_);
  if (rc().failed()) {
    abandon_receive_locked();
    // A NAK that the peer never reads must not keep the connection alive forever.
    if (linger_ && now_ns - last_send_ns_.load(std::memory_order_relaxed) > timeout_ns_) {
      out_.clear();
      responses_queued_ = 0;
      linger_ = false;
      shut_down_locked();
    }
    return;
  }
  if (rx_.phase == Receive::Phase::RnrWait && now_ns > rx_.rnr_deadline_ns) return refuse_rnr_locked();
  check_stalls_locked(now_ns);
  if (rc().failed()) return abandon_receive_locked();
  if (ack_delay_until_ns_ != 0 && now_ns >= ack_delay_until_ns_) flush_ack_locked();
  bool waiting = !in_flight_.empty();
  std::int64_t last_progress = std::max(last_receive_ns_.load(std::memory_order_relaxed),
                                        last_send_ns_.load(std::memory_order_relaxed));
  if (waiting && now_ns - last_progress > timeout_ns_) {
    log::debug("tcp", "silent peer: connection " + std::to_string(number()) + " front sequence " +
                          std::to_string(in_flight_.front().sequence) + " opcode " +
                          std::string(to_string(in_flight_.front().opcode)) + ", next " +
                          std::to_string(next_sequence_) + ", out frames " + std::to_string(out_.size()) +
                          ", rx phase " + std::to_string(static_cast<int>(rx_.phase)) + ", deferred acks " +
                          std::to_string(acks_deferred_));
    fail_locked(Status::TransportRetryExceeded,
                Error(Errc::ConnectionBroken,
                      "peer " + peer_label_ + " silent for " + std::to_string(timeout_ns_ / 1'000'000) +
                          " ms with " + std::to_string(in_flight_.size()) + " operations outstanding"));
  }
}

// The target's side of timeout_ms: a peer that stops in the middle of a frame (a WRITE's payload, say), or
// stops taking our bytes (responses, say), holds regions pinned and memory queued; after timeout_ms without
// progress it is treated as gone, as a verbs responder's retries would run out.
void TcpConnection::check_stalls_locked(std::int64_t now_ns) {
  std::int64_t ms = timeout_ns_ / 1'000'000;
  if (mid_frame() && now_ns - last_receive_ns_.load(std::memory_order_relaxed) > timeout_ns_) {
    fail_locked(
        Status::TransportRetryExceeded,
        Error(Errc::ConnectionBroken,
              "peer " + peer_label_ + " stopped in the middle of a frame for " + std::to_string(ms) + " ms"));
  } else if (want_output_ && now_ns - last_send_ns_.load(std::memory_order_relaxed) > timeout_ns_) {
    fail_locked(Status::TransportRetryExceeded,
                Error(Errc::ConnectionBroken, "peer " + peer_label_ + " took none of our bytes for " +
                                                  std::to_string(ms) + " ms (" + std::to_string(out_.size()) +
                                                  " frames queued)"));
  }
}

}  // namespace rdmakit::tcp
