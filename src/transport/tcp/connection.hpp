// A tcp connection: an RC queue pair emulated over one TCP stream.
//
// Its definitions are split by responsibility (the section map below names each method's file):
// - initiator.cpp: requests this side posts, from post to completion (frames queued, operations kept in
//   flight in order, completed by the peer's responses, NAKs and cumulative ACKs);
// - responder.cpp: serving the peer's requests on this context's registered memory (WRITEs landing, SENDs
//   consuming posted receives, READs, atomics) and what goes back (responses, NAKs, delayed ACKs);
// - stream.cpp: the bytes: frames out of the queue into the socket, the receive state machine that reads
//   frames in and hands each header to the initiator or the responder, the engine's interest;
// - lease.cpp: the polling lease (who reads the socket: the engine thread or a poller);
// - connection.cpp: lifecycle and failure (creation, close, the error state, stall clocks, the tick).
// So a WRITE's round trip is: initiator.cpp (post_admitted, enqueue_locked) -> stream.cpp (flush_locked);
// at the peer stream.cpp (drain_input, dispatch_header) -> responder.cpp (on_request_header, finish_payload,
// the ACK) -> stream.cpp; back here stream.cpp -> initiator.cpp (on_response_header or
// on_ack_riding_on_request, on_cumulative_ack_locked, complete_locked).
//
// One mutex guards the send side, the queues and the error state; the receive state machine has its own
// (rx_mutex_), held by whichever thread reads the socket: the engine thread, or a thread busy-polling one of
// the connection's completion queues.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "core/device_inbound.hpp"
#include "core/device_outbound.hpp"
#include "core/fd.hpp"
#include "core/rc_state.hpp"
#include "core/registration_table.hpp"
#include "core/ring_queue.hpp"
#include "core/soft_cq.hpp"
#include "transport/provider.hpp"
#include "transport/tcp/engine.hpp"
#include "transport/tcp/wire.hpp"

namespace rdmakit::tcp {

class TcpContext;

constexpr std::uint32_t kMaxSge = 16;
// The ACK of a larger WRITE or SEND never waits to ride on a request (responder.cpp, "Delayed ACKs").
constexpr std::uint32_t kAckRideMaxBytes = 64 * 1024;

// A scatter-gather list small enough to live inside the structures that carry it (no allocation).
struct SgList {
  std::array<Segment, kMaxSge> segments{};
  std::uint32_t count = 0;
  std::uint64_t total() const noexcept;
};

// Fills iov with the first `length` bytes of `sgl`; returns the number of entries. (Inline: a SEND's and a
// READ response's payload path, in responder.cpp and initiator.cpp.)
inline std::uint32_t sgl_to_iov(const SgList& sgl, std::uint64_t length, iovec* iov) {
  std::uint32_t count = 0;
  for (std::uint32_t i = 0; i < sgl.count && length > 0; ++i) {
    std::uint64_t take = std::min<std::uint64_t>(length, sgl.segments[i].length);
    if (take == 0) continue;
    iov[count++] = iovec{reinterpret_cast<void*>(sgl.segments[i].addr), take};
    length -= take;
  }
  return count;
}

class TcpConnection final : public detail::ConnectionProvider,
                            public Pollable,
                            public std::enable_shared_from_this<TcpConnection> {
 public:
  static Result<std::shared_ptr<TcpConnection>> create(std::shared_ptr<TcpContext> context, Fd socket,
                                                       PeerInfo peer, const ConnectOptions& options);
  ~TcpConnection() override;

  // connection.cpp: health, statistics, close, the tick (with create above).
  PeerInfo peer() const override { return peer_; }
  ConnectionStats stats() const override;
  Result<void> health() const override;
  void close() override;
  void on_tick(std::int64_t now_ns) override;

  // stream.cpp: the engine's and the pollers' calls into the byte stream.
  bool on_readable() override;
  // Reads what has arrived, from the thread that polls a completion queue of this connection (busy-polling
  // progress: no hand-off through the engine thread). Does nothing while another thread is reading.
  void poll_input(std::int64_t now_ns);
  // When the ACK of a burst of the peer's WRITEs and SENDs leaves (responder.cpp, "Delayed ACKs").
  enum class AckTiming {
    AtOnce,   // at the end of the burst: the engine thread, or a waiter about to sleep, reads
    MayRide,  // a poller reads: it may ride on our next request, within kAckDelayNs
  };
  // Reads a bounded amount (kReadsPerRound); true when input is left for another call.
  bool drain_input(AckTiming timing = AckTiming::AtOnce, std::int64_t now_ns = 0);
  void on_writable() override;
  // The polling lease (lease.cpp): renewed by every poll of one of our completion queues, ended by a
  // waiter that is about to sleep, checked by the engine when it runs out.
  void renew_lease(std::int64_t now_ns);
  void end_lease();
  void on_lease_check(std::int64_t now_ns) override;

  // Public for make_shared; use create().
  TcpConnection(std::uint32_t number, std::uint64_t engine_key, std::shared_ptr<TcpContext> context,
                Fd socket, PeerInfo peer, std::shared_ptr<SoftCompletionQueue> send_cq,
                std::shared_ptr<SoftCompletionQueue> recv_cq);

 private:
  // initiator.cpp (post_admitted) and responder.cpp (post_recv_admitted): under mutex_, after
  // ConnectionProvider::run_post's RC prologue.
  Result<std::uint64_t> post_admitted(std::span<const WorkRequest> chain, std::uint64_t first,
                                      std::unique_lock<std::mutex>& lock) override;
  Result<std::uint64_t> post_recv_admitted(std::span<const Segment> sgl, std::uint64_t sequence,
                                           std::unique_lock<std::mutex>& lock) override;

  // An operation of ours waiting for its response.
  struct InFlight {
    std::uint64_t id;
    std::uint64_t sequence;
    Opcode opcode;
    bool signaled;
    Status local_error;  // != Success: failed at post, nothing was sent; completes with this status
    std::uint32_t bytes;
    SgList results;          // READ and atomics: where the response's bytes go
    bool results_on_device;  // ... and some of it is device memory: staged (start_payload_staged)
  };
  // A frame (or its unsent rest) waiting for room in the socket. Frames live in a ring that moves them
  // when it grows, so the header's part is found from the header itself (part()), never from a pointer
  // kept in iov[0].
  struct OutFrame {
    FrameHeader header;
    std::array<iovec, kMaxSge + 1> iov;  // [0] = header (its length is what is left of it), then payload
    std::uint32_t iov_count = 0;
    std::uint32_t iov_next = 0;  // first iovec not completely sent
    RegistrationTable::Pin pin;  // READ responses: keeps the source region registered until sent
    // The staged path: the payload, copied out of device memory into a pinned buffer, when its source is
    // device memory (the iovecs point into it). Back in the pool once sent.
    detail::PinnedBytes staging;

    // The unsent rest of part i (i >= iov_next).
    iovec part(std::uint32_t i) {
      if (i > 0) return iov[i];
      const std::size_t left = iov[0].iov_len;
      return iovec{reinterpret_cast<char*>(&header) + (sizeof(FrameHeader) - left), left};
    }
  };
  struct PostedRecv {
    std::uint64_t id;
    SgList sgl;
    Status local_error;
    bool on_device;  // some of sgl is device memory: a SEND into it is staged
  };
  // The engine thread's position in the incoming byte stream.
  struct Receive {
    enum class Phase { Header, Payload, Discard, RnrWait } phase = Phase::Header;
    FrameHeader header{};
    std::size_t header_bytes = 0;
    std::array<iovec, kMaxSge> iov{};
    std::uint32_t iov_count = 0, iov_next = 0;
    std::uint64_t discard_left = 0;
    RegistrationTable::Pin pin;
    std::int64_t rnr_deadline_ns = 0;
    // What finish_payload() does once the payload is in (or discarded).
    enum class Then { Nothing, Ack, AckWriteImm, AckSend, ReadDone, Nak } then = Then::Ack;
    PostedRecv recv{};  // AckSend, and Nak when a receive was consumed
    Status nak_status = Status::Success;
    Status recv_status = Status::Success;  // Nak: the consumed receive completes with this
    bool has_recv = false;
    // The staged path: a payload bound for device memory arrives chunk by chunk in the inbound ring's
    // pinned slots, each copied to the device while the next fills; finish_payload() waits for the last
    // copies before it acknowledges (core/device_inbound.hpp).
    std::unique_ptr<detail::DeviceInbound> inbound;  // made at the connection's first such payload
    bool staged = false;                             // the payload in progress goes through `inbound`
  };

  // ---- initiator.cpp: our requests, from post to completion (mutex_ held where _locked; the response
  // handlers run on the thread reading the socket, under rx_mutex_)
  void enqueue_locked(const WorkRequest& request, std::uint64_t id);
  void remember_in_flight(const WorkRequest& request, std::uint64_t id, std::uint64_t sequence,
                          std::uint32_t bytes, Status local_error, bool on_device);
  void on_response_header();  // takes mutex_
  // The payload of a READ response has landed: the READ completes.
  void finish_read_response_locked();
  // A request of the peer's that carries its ACK of ours (kFrameAcks). Takes mutex_.
  void on_ack_riding_on_request(std::uint64_t sequence);
  void on_cumulative_ack_locked(std::uint64_t sequence);
  void complete_locked(const InFlight& op, Status status, std::uint32_t bytes);
  void complete_local_errors_locked();
  // ---- responder.cpp: the peer's requests (on the thread reading the socket, under rx_mutex_) and what
  // goes back: responses, NAKs, delayed ACKs (mutex_ held where _locked)
  void on_request_header();
  bool try_consume_recv();
  // The request waited for a receive past rnr_timeout (on_tick): refused with a NAK.
  void refuse_rnr_locked();
  void execute_read();
  void execute_atomic();
  void finish_payload();
  void send_response_locked(const FrameHeader& request, FrameType type, std::uint64_t value,
                            std::uint32_t length, const iovec* payload, RegistrationTable::Pin pin,
                            detail::PinnedBytes staging = {});
  // An atomic on a word of device memory: read, modify and write back through the CUDA runtime.
  Result<std::uint64_t> device_atomic(const FrameHeader& request);
  void send_nak_locked(const FrameHeader& request, Status status);
  void pause_responder_locked();
  void resume_responder_locked();
  void defer_ack_locked(std::uint64_t sequence);
  void flush_ack_locked();
  // End of a burst read for a poller: sends the deferred ACK now, or leaves it to ride on our next request.
  void settle_ack_locked(std::int64_t now_ns);
  // Puts the deferred ACK (if any) on a request frame we are about to send.
  void attach_ack_locked(FrameHeader& request);
  // ---- stream.cpp: frames into the socket, the receive state machine (with the public calls above)
  void flush_locked();
  void update_interest_locked();
  bool read_some();  // false when the socket has nothing more now (or we stop reading it)
  bool read_socket();
  void take_ahead();
  std::size_t advance_payload(std::size_t got);
  bool mid_frame() const noexcept;
  void dispatch_header();
  void start_payload(const iovec* iov, std::uint32_t count);
  // start_payload, through rx_.inbound's chunks when `device` (some of the iovecs are device memory).
  void start_payload_staged(const iovec* iov, std::uint32_t count, bool device);
  // The current part of the payload is in: the next chunk of a staged payload, else finish_payload().
  void payload_part_done();
  void start_next_chunk();
  // Waits until a staged payload is in device memory (none: nothing to do). Before the pin goes.
  Result<void> land_staged();
  void start_discard(std::uint64_t bytes);
  // ---- connection.cpp: failure and stall clocks (with the public lifecycle calls above)
  // Moves the connection to the error state: the first in-flight op completes with `head_status`,
  // everything else as Flushed, and later posts fail with `reason`.
  void fail_locked(Status head_status, Error reason, bool drain_output = false);
  void fail_now(Status head_status, Error reason);
  void shut_down_locked();
  // After a failure: lets go of the region a half-received WRITE pinned. Needs rx_mutex_.
  void abandon_receive_locked();
  void abandon_receive_if_failed();
  void touch_receive() noexcept;
  void touch_send() noexcept;
  void check_stalls_locked(std::int64_t now_ns);
  void peer_gone(const std::string& why);
  // ---- lease.cpp: the polling lease (with renew_lease, end_lease, on_lease_check above)
  void give_back_input();

  std::shared_ptr<TcpContext> context_;
  RegistrationTable& table_;
  Engine& engine_;
  Fd socket_;
  PeerInfo peer_;
  const std::string peer_label_;  // "<name> at <address>", escaped for messages and logs
  const std::uint64_t engine_key_;
  std::shared_ptr<SoftCompletionQueue> send_queue_, recv_queue_;
  const std::uint32_t send_depth_, recv_depth_;
  const std::int64_t timeout_ns_, rnr_timeout_ns_;

  // mutex_ (ConnectionProvider's) guards what follows, up to rx_mutex_.
  // Rings, not deques: an element of a few hundred bytes is one deque node, a malloc and a free per frame.
  RingQueue<OutFrame> out_;
  RingQueue<InFlight> in_flight_;
  RingQueue<PostedRecv> recvs_;
  std::uint64_t next_sequence_ = 1;  // of request frames on the wire (ids come from rc())
  std::uint64_t ack_sequence_ = 0;   // target side: the last request a deferred ACK answers
  std::uint32_t acks_deferred_ = 0;
  // A deferred ACK may wait for our next request until then (0: it is not waiting for one).
  std::int64_t ack_delay_until_ns_ = 0;
  // We sent a request since our last ACK frame of its own: traffic goes both ways, so an ACK that waits
  // a moment will probably ride on a request. Without that, waiting would only delay it.
  bool posted_since_ack_ = false;
  // The deferred ACK answers a message larger than kAckRideMaxBytes: it leaves at the end of the burst.
  bool ack_at_once_ = false;
  std::uint64_t ack_frames_ = 0, acks_on_requests_ = 0;  // stats()' transport counters
  std::uint64_t responses_queued_ = 0;                   // response frames in out_ (target side)
  std::uint64_t responder_pauses_ = 0;
  bool want_output_ = false;
  bool input_paused_ = false;  // a request waits for a receive to be posted (RNR)
  // Responses queued reached the responder depth: we stop reading requests until the peer reads them.
  std::atomic<bool> responder_full_{false};  // written under mutex_, read by the receiving thread
  std::atomic<bool> input_leased_{false};  // written under mutex_: a poller reads the socket, epoll does not
  std::atomic<std::int64_t> polled_until_ns_{0};
  bool linger_ = false;  // failed, but the last frames (a NAK) still go out before shutdown
  bool shut_down_ = false;
  std::atomic<bool> waiting_for_recv_{false};

  // The receive state machine: driven by the engine thread or by a thread polling our completion queue,
  // whichever holds rx_mutex_. Lock order: rx_mutex_ before mutex_.
  std::mutex rx_mutex_;
  std::atomic<bool> rx_pending_{false};
  Receive rx_;
  AckTiming rx_ack_timing_ = AckTiming::AtOnce;  // of the thread reading now
  // This round (drain_input): the last read returned less than it asked for, so the socket had no more
  // then; a request of the peer was read.
  bool socket_drained_ = false;
  bool round_read_request_ = false;
  std::vector<std::byte> discard_buffer_;
  // Bytes read from the socket past what the current step needed: [begin, end) of `bytes`. Only an empty
  // buffer reads the socket, so when a read finds the socket empty nothing is left here unnoticed by the
  // edge-triggered engine; a reader that stops with bytes here (RNR, responder full) is resumed by a kick.
  struct ReadAhead {
    std::vector<std::byte> bytes;
    std::size_t begin = 0, end = 0;
  } ahead_;

  // Progress clocks: bytes received (or the start of waiting for them), bytes sent (or the start of
  // waiting for room). A peer that stops in the middle of a frame, or stops taking our bytes, fails the
  // connection after timeout_ms and so lets go of the regions it pinned.
  std::atomic<std::int64_t> last_receive_ns_{0};
  std::atomic<std::int64_t> last_send_ns_{0};
};

}  // namespace rdmakit::tcp
