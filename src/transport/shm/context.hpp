// The shm transport's context: its control segment (registration table + doorbell flag), its allocate()
// arena, its doorbell eventfd and the progress thread that delivers receive completions, serves atomics
// on unmapped memory, retries receiver-not-ready SENDs and notices peers that die.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/soft_cq.hpp"
#include "transport/provider.hpp"
#include "transport/shm/fd.hpp"
#include "transport/shm/layout.hpp"
#include "transport/shm/registry.hpp"
#include "transport/shm/segment.hpp"
#include "transport/shm/socket.hpp"

namespace rdmakit::shm {

class ShmConnection;
struct PeerView;
struct Hello;

using Clock = std::chrono::steady_clock;

class ShmContext final : public detail::ContextProvider {
 public:
  static Result<std::shared_ptr<ShmContext>> create(const Config& config);
  ~ShmContext() override;

  std::string_view transport() const noexcept override { return "shm"; }
  Capabilities capabilities() const override;
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size, Access access) override;
  Result<std::shared_ptr<MemoryRegion>> allocate(std::size_t size, Access access) override;
  // Device memory takes the cuda-ipc path (device_path.hpp).
  Result<std::shared_ptr<MemoryRegion>> register_device_memory(
      void* data, std::size_t size, Access access, const detail::cuda::PointerInfo& device) override;
  Result<std::shared_ptr<CompletionQueue>> create_cq(std::size_t depth = 0) override;
  Result<std::shared_ptr<Listener>> listen(std::string_view address = {}) override;
  Result<std::shared_ptr<Connection>> connect(std::string_view address,
                                              const ConnectOptions& options = {}) override;
  std::vector<ConnectionStats> diagnostics() const override;
  std::size_t live_registrations() const override { return registry_ ? registry_->size() : 0; }

  // ---- for the transport's own parts ----
  Registry& registry() noexcept { return *registry_; }
  // Where allocate() takes memory of `access` from: the arena whose sharing matches its remote rights.
  Arena& arena_for(Access access) noexcept;
  std::uint32_t max_sge() const noexcept;
  // Revokes `key`, waits for initiators that pinned it (bounded by Config::timeout), frees the slot.
  void deregister(std::uint32_t key);
  // Runs one round of progress over every connection. `block` false (a poller of a completion queue): skip
  // when another thread is at it.
  bool progress_all(bool block, Clock::time_point* next_deadline = nullptr);
  // The gate, before anything about us is sent: the kernel's word on who is at the other end of `socket`,
  // refused (Errc::ConnectionRefused, and a Refusal to a connector) unless its uid is ours or allowed.
  Result<PeerCredentials> admit(int socket, bool connector, const std::string& address);
  // The handshake on an admitted Unix socket, then the connection.
  Result<std::shared_ptr<Connection>> establish(UniqueFd socket, const PeerCredentials& peer, bool connector,
                                                const ConnectOptions& options, std::string address);
  void detach(ShmConnection* connection);
  // Wakes the progress thread if it sleeps (a large operation was queued for it) and nobody polls.
  void wake() noexcept;
  // The polling lease (layout.hpp, ControlSegment::polled_until): renewed by every poll of one of our
  // completion queues, ended by a waiter that is about to sleep.
  void note_polling() noexcept;
  void end_polling();
  bool leased() const noexcept;

 private:
  explicit ShmContext(Config config);
  Result<void> init();
  Result<std::shared_ptr<MemoryRegion>> register_region(void* data, std::size_t size, Access access,
                                                        Arena* arena, const DeviceRef* device = nullptr);
  void run_progress();
  void sleep_on_doorbell(Clock::time_point deadline);
  Clock::time_point bounded_by_lease(Clock::time_point deadline) const noexcept;
  // The queue a connection completes on: `given`, else its own of `depth` entries.
  Result<std::shared_ptr<SoftCompletionQueue>> pick_cq(const std::shared_ptr<CompletionQueue>& given,
                                                       std::uint32_t depth);
  // One view (and one 32 GiB arena mapping) per peer context, shared by all connections to it.
  Result<std::shared_ptr<PeerView>> peer_view(const Hello& hello, pid_t pid, std::vector<UniqueFd>& fds);

  UniqueFd control_fd_;
  Mapping control_;
  // allocate()'s memory, by remote rights: peers map the first read-write, the second read-only (sealed),
  // and never see the third. A peer is never handed more than was registered for remote access.
  std::optional<Arena> rw_arena_;
  std::optional<Arena> ro_arena_;
  std::optional<Arena> private_arena_;
  std::vector<uid_t> allowed_uids_;  // besides our own (option shm_allowed_uids)
  std::optional<Registry> registry_;
  UniqueFd doorbell_;
  std::atomic<std::uint32_t> next_number_{1};
  std::atomic<std::uint32_t> next_listener_{1};

  mutable std::mutex connections_mutex_;     // held for a whole progress round
  std::vector<ShmConnection*> connections_;  // live connections; each detaches itself before it dies

  std::mutex peers_mutex_;
  std::map<std::uint64_t, std::weak_ptr<PeerView>> peers_;  // by epoch

  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace rdmakit::shm
