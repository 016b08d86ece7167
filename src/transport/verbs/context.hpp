// The verbs context: one device and protection domain, the registration cache, connection numbers.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/provider.hpp"
#include "transport/verbs/cq.hpp"
#include "transport/verbs/device.hpp"
#include "transport/verbs/gpudirect.hpp"
#include "transport/verbs/monitor.hpp"
#include "transport/verbs/reg_cache.hpp"
#include "transport/verbs/staging.hpp"

namespace rdmakit::verbs_impl {

class VerbsConnection;

class VerbsContext final : public detail::ContextProvider {
 public:
  VerbsContext(Config config, VerbsOptions options, std::shared_ptr<Device> device,
               std::shared_ptr<CmMonitor> monitor);
  ~VerbsContext() override;
  CmMonitor& monitor() const noexcept { return *monitor_; }

  std::string_view transport() const noexcept override { return "verbs"; }
  Capabilities capabilities() const override;
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size, Access access) override;
  // GPUDirect (dmabuf, else peer memory) where probed; else staged with local access only (gpudirect.hpp).
  Result<std::shared_ptr<MemoryRegion>> register_device_memory(
      void* data, std::size_t size, Access access, const detail::cuda::PointerInfo& device) override;
  // The GPUDirect probe of `device`, made once and cached.
  GpuDirectProbe gpudirect(int device);
  // Device memory staged through host memory: its ranges, bounce buffers and copies.
  Staging& staging() const noexcept { return *staging_; }
  const std::shared_ptr<Staging>& staging_ptr() const noexcept { return staging_; }
  Result<std::shared_ptr<CompletionQueue>> create_cq(std::size_t depth) override;
  Result<std::shared_ptr<Listener>> listen(std::string_view address) override;
  Result<std::shared_ptr<Connection>> connect(std::string_view address,
                                              const ConnectOptions& options) override;
  std::vector<ConnectionStats> diagnostics() const override;
  std::size_t live_registrations() const override { return cache_.stats().entries; }

  const std::shared_ptr<Device>& device() const noexcept { return device_; }
  // verbs' own options (options.hpp), resolved at open.
  const VerbsOptions& options() const noexcept { return options_; }
  CacheStats cache_stats() const { return cache_.stats(); }
  std::uint32_t next_number() noexcept { return next_number_.fetch_add(1, std::memory_order_relaxed); }
  // The CQs of a new connection: the caller's, or new ones of the connection's own.
  Result<std::pair<std::shared_ptr<VerbsCompletionQueue>, std::shared_ptr<VerbsCompletionQueue>>> cqs_for(
      const ConnectOptions& options);
  void track(const std::shared_ptr<VerbsConnection>& connection);
  // This side's IPv4 address on the device (from its IPv4-mapped GID), 0 when it has none.
  std::uint32_t device_ipv4() const noexcept;
  // Called by a MemoryRegion's destructor.
  void release(const RegistrationCache::Entry* entry);

 private:
  VerbsOptions options_;
  std::shared_ptr<Device> device_;
  std::shared_ptr<CmMonitor> monitor_;
  std::shared_ptr<AsyncEvents> async_events_;  // watched by monitor_ when the library can read them
  RegistrationCache cache_;
  std::shared_ptr<Staging> staging_;
  std::mutex gpudirect_mutex_;
  std::map<int, GpuDirectProbe> gpudirect_;  // by device ordinal
  std::atomic<std::uint32_t> next_number_{1};
  mutable std::mutex connections_mutex_;
  std::vector<std::weak_ptr<VerbsConnection>> connections_;
};

}  // namespace rdmakit::verbs_impl
