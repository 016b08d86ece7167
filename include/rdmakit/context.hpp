// The context: one per process and transport. Opens the transport, registers memory, makes connections.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rdmakit/completion.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"
#include "rdmakit/memory.hpp"
#include "rdmakit/options.hpp"

namespace rdmakit {

namespace detail {
class ContextProvider;  // src/transport/provider.hpp: what a transport implements
class ListenerProvider;
}  // namespace detail

// What a transport can do, so layers above can choose without knowing which transport it is.
struct Capabilities {
  bool one_sided_without_target_cpu = false;  // WRITE/READ complete with no thread of the target running
  bool atomics_coherent_with_cpu = false;     // remote atomics are atomic against the owner's CPU atomics
  bool kernel_bypass = false;
  // Memory keys come from the device (verbs), by its own rule: rxe and mlx5 make them of a region index and
  // 8 random bits, so one key's neighbours are guessable. The software transports draw 32 random bits.
  bool device_keys = false;
  // A receive posted to a failed connection completes Flushed. true on every transport of rdmakit (verbs
  // flushes it in software, since a device may leave it pending: rxe in Debian 12's kernel 6.1 does); a
  // transport that cannot says false, and callers must not wait for such a receive there.
  bool flushes_receives_posted_in_error = true;
  // The death of the peer's process is announced to this side (verbs: the peer's kernel disconnects, and
  // rdma_cm's DISCONNECTED moves the QP to the error state) before an operation meets it, so what is
  // pending may all complete Flushed. false (tcp, shm): the oldest pending operation is the one that meets
  // the death and fails with TransportRetryExceeded, everything behind it Flushed.
  bool peer_death_announced = false;
  std::uint64_t max_message_size = 0;  // bytes of one operation's local segments together
  std::uint32_t max_sge = 0;           // scatter-gather entries per operation (the max_sge option, capped)
  std::uint32_t max_inline = 0;
  // A CompareSwap/FetchAdd on a remote address that is not 8-byte aligned: refused by post() with
  // InvalidArgument (verbs providers check it in ibv_post_send), or accepted and completed with
  // RemoteInvalidRequest (the target finds it, as the IB specification describes).
  bool misaligned_atomic_refused_at_post = false;
  // Addresses are names with this prefix (shm: "shm:"), not "host:port"; empty for IP transports.
  std::string address_prefix{};
  // Reaches only peers on this host (same boot, same IPC and mount namespaces: shm). Layers that pick a
  // transport per peer (collectives, the transfer engine) prefer such a transport for same-host peers.
  bool same_host_only = false;
  // Threads per context the transport runs to make progress (tcp: the engine; shm: the progress thread).
  std::uint32_t progress_threads = 0;
  // The path CUDA device memory takes here (docs/gpu.md): "staged", "cuda-ipc", "gpudirect-dmabuf",
  // "gpudirect-peermem", or "none" (register_memory refuses device memory).
  std::string device_memory_path = "none";
  // What one message between two ranks costs on this transport, for layers that model time (the
  // collectives pick an allreduce algorithm by it: docs/allreduce-model.md): a fixed cost per message and
  // a bandwidth, fitted by bench/coll/model.py where measured. 0: not declared (tcp's figures are used).
  double message_cost_us = 0;
  double bandwidth_bytes_per_us = 0;  // = MB/s
};

// One field of Capabilities by name: its value typed, and as text the way rdmakit-info prints it.
struct CapabilityInfo {
  std::string name{};
  std::variant<bool, std::uint64_t, double, std::string> value{};
  std::string text{};
};
// Every field of `capabilities`, in declaration order: what rdmakit-info and Python's
// Context.capabilities list (a field added to Capabilities fails the library's build until listed here).
RDMAKIT_API std::vector<CapabilityInfo> describe_capabilities(const Capabilities& capabilities);

struct ConnectOptions {
  std::shared_ptr<CompletionQueue> send_cq{};  // empty: the connection gets its own
  std::shared_ptr<CompletionQueue> recv_cq{};  // empty: the connection gets its own
};

// Facades, as Connection: the library forwards to the transport's provider (src/transport/provider.hpp).
class RDMAKIT_API Listener {
 public:
  virtual ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  // The address peers connect to, e.g. "127.0.0.1:43121" (the real port when 0 was asked for).
  std::string address() const;
  // Waits up to `timeout` for a peer to connect. Errc::Timeout when none did.
  Result<std::shared_ptr<Connection>> accept(std::chrono::milliseconds timeout,
                                             const ConnectOptions& options = {});

 private:
  friend class detail::ListenerProvider;
  Listener() noexcept = default;
};

class RDMAKIT_API Context : public std::enable_shared_from_this<Context> {
 public:
  // Opens the transport named by options.transport, else RDMAKIT_TRANSPORT, else "tcp".
  static Result<std::shared_ptr<Context>> open(const Options& options = {});
  virtual ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Config& config() const noexcept;
  // This context's identity as peers see it (name, id, epoch).
  PeerInfo identity() const;
  std::string_view transport() const noexcept;
  Capabilities capabilities() const;

  // Registers caller memory. The memory must stay allocated until the region is destroyed. `kind` says
  // where it lives (MemoryKind::Auto, the default, detects CUDA device memory); the transport chooses the
  // path its bytes take (MemoryRegion::path(), docs/gpu.md) or refuses device memory with an error naming
  // what is missing: device memory is never treated as host memory.
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size, Access access);
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size, Access access,
                                                        MemoryKind kind);
  // Memory that rdmakit allocates, registered and (where the transport can) shareable in one call: the
  // fast path for shm, where peers map it directly. Page-aligned and zeroed; freed with the region.
  // MemoryKind::Cuda: device memory of the calling thread's current device (cudaMalloc; not zeroed).
  Result<std::shared_ptr<MemoryRegion>> allocate(std::size_t size, Access access);
  Result<std::shared_ptr<MemoryRegion>> allocate(std::size_t size, Access access, MemoryKind kind);

  Result<std::shared_ptr<CompletionQueue>> create_cq(std::size_t depth = 0);
  // Listens on `address` ("host:port"); empty: Config::listen_address (loopback by default).
  Result<std::shared_ptr<Listener>> listen(std::string_view address = {});
  Result<std::shared_ptr<Connection>> connect(std::string_view address, const ConnectOptions& options = {});
  // Stats of every live connection of this context.
  std::vector<ConnectionStats> diagnostics() const;
  // The memory registrations this context holds now: one per live region of register_memory() and
  // allocate() (tcp, shm); verbs counts the ibv_mr's of its registration cache, which regions of
  // overlapping ranges share and which may outlive their regions while cached. For leak checks: a count
  // that keeps growing while regions come and go means regions are being kept alive.
  std::size_t live_registrations() const;

 private:
  friend class detail::ContextProvider;
  Context() noexcept = default;
};

}  // namespace rdmakit
