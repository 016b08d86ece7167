// The tcp transport's context and listener.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "core/pinned_pool.hpp"
#include "core/registration_table.hpp"
#include "transport/provider.hpp"
#include "transport/tcp/engine.hpp"
#include "transport/tcp/options.hpp"

namespace rdmakit::tcp {

class TcpContext final : public detail::ContextProvider {
 public:
  static Result<std::shared_ptr<Context>> open(const Config& config);
  ~TcpContext() override;

  std::string_view transport() const noexcept override { return "tcp"; }
  Capabilities capabilities() const override;
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size, Access access) override;
  // Device memory takes the staged path: the progress thread copies it through host memory.
  Result<std::shared_ptr<MemoryRegion>> register_device_memory(
      void* data, std::size_t size, Access access, const detail::cuda::PointerInfo& device) override;
  Result<std::shared_ptr<CompletionQueue>> create_cq(std::size_t depth) override;
  Result<std::shared_ptr<Listener>> listen(std::string_view address) override;
  Result<std::shared_ptr<Connection>> connect(std::string_view address,
                                              const ConnectOptions& options) override;
  std::vector<ConnectionStats> diagnostics() const override;
  std::size_t live_registrations() const override { return table_->size(); }

  RegistrationTable& table() noexcept { return *table_; }
  Engine& engine() noexcept { return *engine_; }
  // The pinned slots through which connections receive payloads bound for device memory.
  const std::shared_ptr<detail::PinnedSlotPool>& device_slots() const noexcept { return device_slots_; }
  // Connection numbers are 24 bits (they go into operation ids): after a wrap-around the counter skips the
  // numbers of live connections, so a number never names two connections at once.
  std::uint32_t acquire_connection_number();
  void release_connection_number(std::uint32_t number);
  // Tests: where the connection counter continues, to force its wrap-around.
  void set_next_connection_number_for_testing(std::uint64_t next);

  TcpContext(Config config, TcpOptions options, std::unique_ptr<Engine> engine);

 private:
  TcpOptions options_;  // tcp's own options (options.hpp), resolved at open
  std::shared_ptr<RegistrationTable> table_;
  std::mutex numbers_mutex_;
  std::uint64_t next_connection_ = 1;               // guarded by numbers_mutex_
  std::unordered_set<std::uint32_t> live_numbers_;  // guarded by numbers_mutex_
  std::shared_ptr<detail::PinnedSlotPool> device_slots_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace rdmakit::tcp
