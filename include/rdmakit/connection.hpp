// Connections: reliable, ordered, like an RC queue pair.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/completion.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit {

namespace detail {
class ConnectionProvider;  // src/transport/provider.hpp: what a transport implements
}

// One operation to post. `local` is read for WRITE/SEND and written for READ and atomics (one 8-byte
// segment receiving the old value). Spans must stay valid only during post(); the bytes they point at
// must stay untouched until the operation completes.
struct WorkRequest {
  Opcode opcode = Opcode::Write;
  std::span<const Segment> local{};
  RemoteAddress remote{};         // one-sided operations
  std::uint64_t compare_add = 0;  // CompareSwap: expected value; FetchAdd: addend
  std::uint64_t swap = 0;         // CompareSwap: new value
  std::uint32_t imm = 0;          // WriteImm, and Send when with_imm
  bool with_imm = false;          // Send carries imm
  bool signaled = true;           // false: no completion on success (failures always complete)
};

// Who is at the other end.
struct PeerInfo {
  std::string name{};       // Config::name of the peer's context
  std::uint64_t id = 0;     // hash of the name
  std::uint64_t epoch = 0;  // unique per life of the peer's context
  std::string address{};    // transport address, e.g. "127.0.0.1:40000"
};

// One counter of a transport's own (tcp's "ack_frames", ...), by name: a transport adds one without
// ConnectionStats growing. tcp keeps queued_responses, responder_pauses, ack_frames and acks_on_requests
// (docs/architecture.md); shm, verbs and fault add none of their own (fault passes its inner one's on).
struct TransportCounter {
  std::string name{};
  std::uint64_t value = 0;
};

// Diagnostics: "who is stuck" has an answer.
struct ConnectionStats {
  std::uint32_t connection = 0;
  std::string peer{};
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  std::uint64_t outstanding = 0;                            // posted and not completed, receives included
  std::chrono::system_clock::time_point last_completion{};  // epoch 0 when nothing completed yet
  bool failed = false;                                      // the connection is in the error state
  std::string failure{};                                    // why, when failed
  // The transport's own counters, in the order it keeps them (empty where it keeps none).
  std::vector<TransportCounter> transport_counters{};

  // The value of the transport counter `name`; nullopt where this transport keeps no counter of that name.
  RDMAKIT_API std::optional<std::uint64_t> counter(std::string_view name) const noexcept;
};

// A facade: every member function is non-virtual and defined in the library, which forwards to the
// transport's provider (src/transport/provider.hpp); only the library can make one.
class RDMAKIT_API Connection {
 public:
  virtual ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Posts a chain of work requests (one doorbell where the transport has doorbells). The requests get
  // consecutive ids; the first is returned. Errors here mean nothing of the chain was posted: a malformed
  // request (InvalidArgument, StaleDescriptor), a full queue, or a connection closed by this side. A chain
  // posted behind a failure is accepted and every request completes Flushed, as on a QP in the error state.
  Result<std::uint64_t> post(std::span<const WorkRequest> chain);
  // Posts a receive buffer for a SEND or a WRITE with immediate. Behind a failure (the peer closed, say)
  // it is accepted and completes Flushed.
  Result<std::uint64_t> post_recv(std::span<const Segment> sgl);

  // Shorthands for single operations.
  Result<std::uint64_t> write(std::span<const Segment> local, RemoteAddress remote, bool signaled = true);
  Result<std::uint64_t> write(Segment local, RemoteAddress remote, bool signaled = true);
  Result<std::uint64_t> write_imm(std::span<const Segment> local, RemoteAddress remote, std::uint32_t imm);
  Result<std::uint64_t> write_imm(Segment local, RemoteAddress remote, std::uint32_t imm);
  Result<std::uint64_t> read(std::span<const Segment> local, RemoteAddress remote);
  Result<std::uint64_t> read(Segment local, RemoteAddress remote);
  Result<std::uint64_t> compare_swap(Segment old_value, RemoteAddress remote, std::uint64_t expected,
                                     std::uint64_t desired);
  Result<std::uint64_t> fetch_add(Segment old_value, RemoteAddress remote, std::uint64_t add);
  Result<std::uint64_t> send(std::span<const Segment> local);
  Result<std::uint64_t> send(Segment local);
  Result<std::uint64_t> send_imm(Segment local, std::uint32_t imm);
  Result<std::uint64_t> post_recv(Segment sgl);

  // Load/store access to the peer's memory where this process maps it, as UCX's ucp_rkey_ptr gives: a
  // pointer, valid in this process, to [remote.addr, remote.addr + length) at the peer. shm: memory the
  // peer got from Context::allocate() with the rights asked for (RemoteWrite maps it writable; RemoteRead
  // alone read-only). Loads and stores through it are READs and WRITEs that no queue orders or completes:
  // the two processes order them with their own synchronisation (atomics on shared memory, or a SEND
  // after the stores). The key, the range and the rights are checked once, here: the pointer stays mapped
  // while this connection lives, but once the peer deregisters the memory it points into the peer's free
  // arena space, so stop using it first (as with an rkey). Errors: NotSupported where the transport maps
  // nothing (verbs, tcp, fault) or the memory is not in the peer's arenas (register_memory(): reached by
  // cross-memory attach only); InvalidArgument for a key, range or right the peer did not grant;
  // StaleDescriptor for an earlier life of the peer; ConnectionBroken after close().
  Result<std::byte*> map_remote(RemoteAddress remote, std::size_t length, Access access);

  // Waits for operation `id` (a send-side or a receive id) on the queue it completes on. InvalidArgument at
  // once for an id this connection never issued, or whose completion was already taken (poll or wait),
  // however long ago; also for an unsignaled success once 2-4 times the deeper queue's depth of operations
  // were posted after it (it has no completion: until then a wait on it times out).
  Result<Completion> wait(std::uint64_t id, std::chrono::nanoseconds timeout);

  CompletionQueue& send_cq() const noexcept;
  CompletionQueue& recv_cq() const noexcept;
  // Context-unique number, also found in Completion::connection.
  std::uint32_t number() const noexcept;
  PeerInfo peer() const;
  ConnectionStats stats() const;
  // Ok while healthy; afterwards the first failure, exactly as it happened (sticky, like a QP in the error
  // state): after an operation failed, TransportFailure with the status it completed with.
  Result<void> health() const;
  // Closes the connection: pending operations complete as Flushed. Also done by the destructor.
  void close();

  // Ids carry the connection number and whether they are receive ids.
  static constexpr std::uint64_t kRecvBit = std::uint64_t{1} << 39;
  static bool is_recv_id(std::uint64_t id) noexcept { return (id & kRecvBit) != 0; }
  static std::uint32_t connection_of(std::uint64_t id) noexcept {
    return static_cast<std::uint32_t>(id >> 40);
  }

 private:
  // Only the provider derives from a Connection: every Connection is a detail::ConnectionProvider, which the
  // library's definitions of the functions above rely on.
  friend class detail::ConnectionProvider;
  Connection() noexcept = default;
};

}  // namespace rdmakit
