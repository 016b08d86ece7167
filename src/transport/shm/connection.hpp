// A connection of the shm transport. The initiator carries out every operation itself, in order:
// WRITE/READ/atomics straight into the peer's memory, SEND and WRITE-with-immediate by taking a receive
// the peer posted in the shared link segment, filling it and writing its completion there. An operation
// that must wait (no receive posted yet, an atomic the peer's progress thread serves) blocks the ones
// behind it, as on an RC queue pair; the context's progress thread retries it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/rc_state.hpp"
#include "core/ring_queue.hpp"
#include "core/soft_cq.hpp"
#include "transport/provider.hpp"
#include "transport/shm/context.hpp"
#include "transport/shm/fd.hpp"
#include "transport/shm/layout.hpp"
#include "transport/shm/peer.hpp"
#include "transport/shm/records.hpp"

namespace rdmakit::shm {

class ShmConnection final : public detail::ConnectionProvider {
 public:
  ShmConnection(std::shared_ptr<ShmContext> context, std::uint32_t number,
                std::shared_ptr<SoftCompletionQueue> send_cq, std::shared_ptr<SoftCompletionQueue> recv_cq,
                std::shared_ptr<const PeerView> peer, Mapping link, int side, UniqueFd socket,
                std::string address);
  ~ShmConnection() override;

  PeerInfo peer() const override;
  ConnectionStats stats() const override;
  Result<void> health() const override;
  void close() override;
  Result<std::byte*> map_remote(RemoteAddress remote, std::size_t length, Access access) override;

  // ---- for the context's progress engine (called with the context's connections mutex held) ----
  int socket_fd() const noexcept { return socket_.get(); }
  bool gone() const noexcept { return gone_.load(std::memory_order_acquire); }
  // Reaps receive completions, serves the peer's atomic requests, retries blocked operations. `poller`:
  // the caller is a thread polling our completion queue (it holds the lease), not the progress thread.
  bool progress(Clock::time_point* next_deadline, bool poller);
  // Anything for progress() (a lock-free look; see inbound.cpp).
  bool has_work() const noexcept;
  // The peer's process died or closed its end: pending operations fail.
  void peer_gone();
  // A live initiator at the other end holds `key` pinned in our memory.
  bool pins(std::uint32_t key) const noexcept;

 private:
  Result<std::uint64_t> post_admitted(std::span<const WorkRequest> chain, std::uint64_t first,
                                      std::unique_lock<std::mutex>& lock) override;
  Result<std::uint64_t> post_recv_admitted(std::span<const Segment> sgl, std::uint64_t sequence,
                                           std::unique_lock<std::mutex>& lock) override;

  struct Pending {
    std::uint64_t id = 0;
    WorkRequest request;
    std::array<Segment, kMaxSge> sge{};
    std::uint32_t count = 0;
    std::uint64_t total = 0;       // bytes of the local segments
    std::uint64_t offset = 0;      // bytes of a large WRITE/READ already moved
    Clock::time_point deadline{};  // RNR or atomic deadline, set when first blocked
    bool atomic_requested = false;
    std::span<const Segment> local() const noexcept { return {sge.data(), count}; }
  };
  struct Outcome {
    bool blocked = false;
    bool more = false;  // a chunk of a large operation moved; more to come
    Status status = Status::Success;
    std::uint32_t bytes = 0;
  };

  Inbound& in() const noexcept { return link_.as<LinkSegment>()->into[side_]; }
  Inbound& out() const noexcept { return link_.as<LinkSegment>()->into[1 - side_]; }

  // datapath.cpp (all with mutex_ held)
  enum class Drainer { Poster, Poller, ProgressThread };
  bool drain(Drainer who);
  bool peer_hung_up();
  Outcome execute(Pending& op);
  Outcome do_write(Pending& op);
  Outcome do_read(Pending& op);
  Outcome do_atomic(Pending& op);
  Outcome do_atomic_by_owner(Pending& op, bool result_on_device);
  Outcome do_send(Pending& op);
  Outcome wait_for_receive(Pending& op);
  // `device_mask`: bit i set when local[i] is device memory; `refs` (when given): its allocation, in refs[i].
  Status check_local(std::span<const Segment> local, bool write, std::uint64_t* total,
                     std::uint32_t* device_mask = nullptr, DeviceRef* refs = nullptr) const;
  // WRITE (`write`) or READ of `length` bytes of op's local segments from op.offset on, at `addr` in the
  // peer under `key` (checked and pinned by the caller): the host path, or cuda-ipc when either side is
  // device memory.
  Status transfer(const Pending& op, std::uint32_t device_mask, std::uint32_t key, std::uint64_t addr,
                  std::uint64_t length, bool write, bool streaming);
  // A SEND where the local segments or the peer's receive segments are device memory.
  Status send_device(const Pending& op, std::uint32_t device_mask, const RecvEntry& entry,
                     std::uint32_t count, std::uint64_t taken, std::uint64_t length);
  template <typename F>
  Status pinned(std::uint32_t key, std::uint64_t addr, std::uint64_t length, Access needed, F&& access);
  // Maps the whole region behind the peer's `key` into our page tables the first time this connection
  // accesses it (see datapath.cpp).
  void populate_once(std::uint32_t key, bool write);
  void unpin();
  bool receive_ready(bool* closed);
  void produce(const RecvDone& done);
  void ring_if_owed();
  // inbound.cpp
  bool reap();
  bool serve_atomic();

  // connection.cpp
  void finish(std::uint64_t id, Opcode opcode, bool signaled, const Outcome& outcome);
  void push(SoftCompletionQueue& cq, const Completion& completion);
  void settle_unsignaled();  // the deferred rc().completed() of unsignaled successes
  // The error state of a QP: records `why` (the first failure stays) and completes what is pending, the
  // head with `head_status` (TransportRetryExceeded when the peer went away), the rest Flushed.
  void enter_error(Error why, Status head_status);
  void close_inbound();
  void peer_gone_locked();

  std::shared_ptr<ShmContext> context_;
  std::shared_ptr<SoftCompletionQueue> send_cq_;
  std::shared_ptr<SoftCompletionQueue> recv_cq_;
  std::shared_ptr<const PeerView> peer_;
  Mapping link_;
  int side_;
  UniqueFd socket_;
  std::string address_;

  // mutex_ (ConnectionProvider's) guards what follows.
  RingQueue<Pending> pending_;          // posted, not yet carried out (head may be blocked)
  std::deque<PostedReceive> receives_;  // posted receives, oldest first (our copy: ids, capacities)
  std::uint64_t recv_posted_ = 0;       // our copy of in().recv_posted
  std::uint64_t reaped_ = 0;            // our copy of in().reaped
  std::size_t recvs_queued_ = 0;        // recv_posted_ - reaped_: what post_recv's admission counts
  std::atomic<bool> gone_{false};
  bool wants_progress_ = false;   // a large operation waits for the progress thread
  bool doorbell_owed_ = false;    // produce() published a receive completion; drain() rings the peer
  std::uint32_t pinned_key_ = 0;  // what out().pin holds for a WRITE/READ/atomic of this drain (0: none)
  // Per registration slot of the peer, the key whose whole range populate_once() mapped in (0: none yet);
  // allocated at the first one-sided operation.
  std::unique_ptr<std::uint32_t[]> populated_;
  std::optional<std::uint64_t> unsignaled_done_;  // the last unsignaled success not yet counted in rc()
  // Lock-free mirrors for has_work(), written under mutex_: pending_ is not empty; reaped_.
  std::atomic<bool> has_pending_{false};
  std::atomic<std::uint64_t> reaped_seen_{0};
};

}  // namespace rdmakit::shm
