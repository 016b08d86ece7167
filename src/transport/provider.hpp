// The provider interface: what a transport implements, apart from what users call (rdma-core's driver.h
// beside verbs.h). The public classes (include/rdmakit/{connection,completion,context}.hpp) are facades:
// non-virtual functions defined in src/core that downcast `this` to the provider below and forward. Every
// Connection is a ConnectionProvider (the public constructors are private, friends of these classes), every
// CompletionQueue a CompletionQueueProvider, every Context a ContextProvider, every Listener a
// ListenerProvider. Each transport class derives from one of these, never from the public class.
//
// Names: a provider re-declares the public calls that a transport implements as virtuals of the same name
// (peer(), stats(), health(), close(), accept(), ...); they hide the public ones, so a call through the
// public class enters src/core's definition, which forwards here, and a call through a transport class
// dispatches directly. The post and poll paths are the exception: their public definitions run shared code
// first (the RC prologue; the stash of wait_for), so their hooks have names of their own (post_admitted,
// post_recv_admitted, poll_transport, poll_taken, sleep_until).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "core/rc_state.hpp"
#include "cuda/pointer.hpp"
#include "rdmakit/completion.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit {
class SoftCompletionQueue;  // core/soft_cq.hpp
}

namespace rdmakit::detail {

// ---- Completion queues

class CompletionQueueProvider : public CompletionQueue {
 public:
  // The public calls (CompletionQueue's definitions forward here).
  using CompletionQueue::wait;  // the two-argument one, with the default mode
  std::size_t poll(std::span<Completion> out);
  // Ok while the queue works (see CompletionQueue::health).
  virtual Result<void> health() const { return {}; }
  Result<std::size_t> wait(std::span<Completion> out, std::chrono::nanoseconds timeout, WaitMode mode);
  Result<Completion> wait_for(std::uint64_t id, std::chrono::nanoseconds timeout);
  WaitMode default_wait_mode() const noexcept { return mode_; }

  // The connections completing here (ConnectionProvider attaches and detaches itself), told which completions
  // the application took, so that a second wait() on one fails at once.
  void attach_state(std::shared_ptr<RcState> state);
  void detach_state(const RcState* state);

 protected:
  CompletionQueueProvider(WaitMode mode, std::chrono::microseconds spin) noexcept
      : mode_(mode), spin_(spin) {}
  // Transport hooks: take ready completions without blocking; sleep until something may be ready
  // or the deadline passes (spurious wake-ups are fine).
  virtual std::size_t poll_transport(std::span<Completion> out) = 0;
  // poll_transport, then note_taken of what it returned. A transport that already looks up the
  // connections of its completions under its own lock may do both there: poll() runs once per spin of a
  // busy-polling wait, and the second lock and lookup were a tenth of an 8-byte verbs READ's user-space
  // instructions.
  virtual std::size_t poll_taken(std::span<Completion> out);
  virtual Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) = 0;
  // Tells the attached connections which completions the application took (what poll_taken adds to
  // poll_transport), for a transport whose own lookup missed one.
  void note_taken(std::span<const Completion> taken);

 private:
  std::size_t take_stashed(std::span<Completion> out);
  std::optional<Completion> take_from_stash(std::uint64_t id);

  WaitMode mode_;
  std::chrono::microseconds spin_;
  // Completions that wait_for() passed over, returned first by poll().
  std::atomic<bool> has_stash_{false};
  std::mutex stash_mutex_;
  std::deque<Completion> stash_;
  std::mutex states_mutex_;
  std::vector<std::shared_ptr<RcState>> states_;
};

inline CompletionQueueProvider& provider(CompletionQueue& queue) noexcept {
  return static_cast<CompletionQueueProvider&>(queue);
}
inline const CompletionQueueProvider& provider(const CompletionQueue& queue) noexcept {
  return static_cast<const CompletionQueueProvider&>(queue);
}

// ---- Connections

// How a transport admits a chain into its send queue (and a receive into its receive queue), after the
// checks that every transport shares: RcState's (1) the request and (2) a connection closed by this side
// (check_post / check_post_recv), run by Connection::post() / post_recv() for every transport.
enum class Admission : std::uint8_t {
  // tcp, shm: a queue in software. post() also runs (3) and (4) under the connection's lock (mutex_):
  // behind a failure the chain is accepted and flushed into the SoftwareQueue's completion queue, a full
  // queue is refused; then it takes the ids and calls post_admitted with the lock held.
  Software,
  // verbs: the device's queue pair admits. Behind a failure the QP is in the error state and flushes what
  // is posted; a full queue is ENOMEM from ibv_post_send, and the device, not software, checks local keys.
  // Taking a lock here would add one to every post for nothing the QP does not already do. post() takes
  // the ids and calls post_admitted without a lock; a hook that gives up gives the ids back
  // (RcState::give_back_sends / give_back_recv).
  Device,
  // fault: wraps another connection, which admits (its ids become this connection's: RcState::issued).
  // post() calls post_admitted with no lock and no ids taken (`first` is 0).
  Wrapper,
};

// What Admission::Software reads under the lock. `queued` points at the transport's own count of what its
// queue holds (a RingQueue's size, say): read where it lives, no call and no second counter to keep.
struct SoftwareQueue {
  const std::size_t* queued = nullptr;
  std::uint64_t depth = 0;
  SoftCompletionQueue* flush_to = nullptr;  // where a request posted behind a failure completes Flushed
};

class ConnectionProvider : public Connection {
 public:
  ~ConnectionProvider() override;

  // The public calls that a transport implements (Connection's definitions forward here).
  virtual PeerInfo peer() const = 0;
  virtual ConnectionStats stats() const = 0;
  virtual Result<void> health() const = 0;
  virtual void close() = 0;
  // NotSupported unless the transport maps peers' memory (shm).
  virtual Result<std::byte*> map_remote(RemoteAddress remote, std::size_t length, Access access);

  std::uint32_t number() const noexcept { return number_; }
  RcState& rc() const noexcept { return *state_; }
  const std::shared_ptr<RcState>& rc_ptr() const noexcept { return state_; }
  const std::shared_ptr<CompletionQueue>& send_cq_ptr() const noexcept { return send_cq_; }
  const std::shared_ptr<CompletionQueue>& recv_cq_ptr() const noexcept { return recv_cq_; }

  // The RC prologue, for Connection::post() and post_recv() (src/core/connection.cpp).
  Result<std::uint64_t> run_post(std::span<const WorkRequest> chain);
  Result<std::uint64_t> run_post_recv(std::span<const Segment> sgl);

 protected:
  // `state` keeps this connection's RC state (rc_state.hpp); the queues learn of it so that they can tell
  // it which completions the application took. `caps` and `peer_epoch` are what the checks of every post
  // read (check_chain); `admission` says what the prologue does beyond them.
  ConnectionProvider(std::uint32_t number, std::shared_ptr<CompletionQueue> send_cq,
                     std::shared_ptr<CompletionQueue> recv_cq, std::shared_ptr<RcState> state,
                     Admission admission, Capabilities caps, std::uint64_t peer_epoch);
  // Admission::Software: which queues (3) and (4) read. Call it in the constructor's body, before the
  // connection is published.
  void set_software_queues(SoftwareQueue sends, SoftwareQueue recvs) noexcept {
    sends_ = sends;
    recvs_ = recvs;
  }
  std::uint64_t make_id(std::uint64_t sequence, bool recv) const noexcept {
    return (std::uint64_t{number_} << 40) | (recv ? kRecvBit : 0) | (sequence & (kRecvBit - 1));
  }
  const Capabilities& caps() const noexcept { return caps_; }

  // The lock that orders this connection's send side, its queues and its completions (Admission::Software:
  // the prologue's lock; a transport guards its own state with it too).
  mutable std::mutex mutex_;

 private:
  // The transport's part of post(), after the prologue: carries out (or queues) `chain`, whose ids start at
  // send_id(first) (Admission::Software and Device). Software: called with `lock` holding mutex_; the hook
  // may unlock it for work after the queueing (tcp lets go of a pinned region). Returns the first id, or an
  // error for a chain of which nothing was posted.
  virtual Result<std::uint64_t> post_admitted(std::span<const WorkRequest> chain, std::uint64_t first,
                                              std::unique_lock<std::mutex>& lock) = 0;
  // The same for post_recv(): the receive's id is recv_id(sequence) (Software and Device).
  virtual Result<std::uint64_t> post_recv_admitted(std::span<const Segment> sgl, std::uint64_t sequence,
                                                   std::unique_lock<std::mutex>& lock) = 0;

  std::uint32_t number_;
  Admission admission_;
  std::shared_ptr<RcState> state_;
  std::shared_ptr<CompletionQueue> send_cq_;
  std::shared_ptr<CompletionQueue> recv_cq_;
  const Capabilities caps_;
  const std::uint64_t peer_epoch_;
  SoftwareQueue sends_{}, recvs_{};
};

inline ConnectionProvider& provider(Connection& connection) noexcept {
  return static_cast<ConnectionProvider&>(connection);
}
inline const ConnectionProvider& provider(const Connection& connection) noexcept {
  return static_cast<const ConnectionProvider&>(connection);
}

// ---- Memory regions: plain data, no hooks; only a provider may make one.

class MemoryRegionProvider : public MemoryRegion {
 protected:
  MemoryRegionProvider(void* data, std::size_t size, Access access, std::uint32_t lkey, std::uint32_t rkey,
                       std::uint64_t owner_id, std::uint64_t owner_epoch) noexcept
      : MemoryRegion(data, size, access, lkey, rkey, owner_id, owner_epoch) {}
  // Device memory: where it lives and the path the transport chose for it (kind() and path() report them).
  void set_placement(MemoryKind kind, int device, MemoryPath path) noexcept {
    kind_ = kind;
    device_ = device;
    path_ = path;
  }
};

// ---- Listeners and contexts

class ListenerProvider : public Listener {
 public:
  virtual std::string address() const = 0;
  virtual Result<std::shared_ptr<Connection>> accept(std::chrono::milliseconds timeout,
                                                     const ConnectOptions& options = {}) = 0;

 protected:
  ListenerProvider() noexcept = default;
};

inline ListenerProvider& provider(Listener& listener) noexcept {
  return static_cast<ListenerProvider&>(listener);
}
inline const ListenerProvider& provider(const Listener& listener) noexcept {
  return static_cast<const ListenerProvider&>(listener);
}

class ContextProvider : public Context {
 public:
  const Config& config() const noexcept { return config_; }
  PeerInfo identity() const { return identity_; }

  virtual std::string_view transport() const noexcept = 0;
  virtual Capabilities capabilities() const = 0;
  virtual Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size,
                                                                Access access) = 0;
  // Device memory: [data, data+size) inside the CUDA allocation `device` describes. The transport chooses
  // the path (set_placement) or refuses. Default: refused with NotSupported naming the transport, so device
  // memory is never treated as host memory by a transport that has no path for it.
  virtual Result<std::shared_ptr<MemoryRegion>> register_device_memory(void* data, std::size_t size,
                                                                       Access access,
                                                                       const cuda::PointerInfo& device);
  // Default: anonymous memory, registered (src/core/context.cpp); shm allocates shareable memory.
  virtual Result<std::shared_ptr<MemoryRegion>> allocate(std::size_t size, Access access);
  // The public defaults, so that a call through a transport class reads as one through Context.
  virtual Result<std::shared_ptr<CompletionQueue>> create_cq(std::size_t depth = 0) = 0;
  virtual Result<std::shared_ptr<Listener>> listen(std::string_view address = {}) = 0;
  virtual Result<std::shared_ptr<Connection>> connect(std::string_view address,
                                                      const ConnectOptions& options = {}) = 0;
  virtual std::vector<ConnectionStats> diagnostics() const = 0;
  virtual std::size_t live_registrations() const = 0;

 protected:
  explicit ContextProvider(Config config);
  // For a context that wraps another (fault): peers see the inner context's identity, so this one has it too.
  ContextProvider(Config config, PeerInfo identity)
      : config_(std::move(config)), identity_(std::move(identity)) {}

 private:
  Config config_;
  PeerInfo identity_;
};

inline ContextProvider& provider(Context& context) noexcept { return static_cast<ContextProvider&>(context); }
inline const ContextProvider& provider(const Context& context) noexcept {
  return static_cast<const ContextProvider&>(context);
}

}  // namespace rdmakit::detail
