// The context of the fault transport: wraps the inner context, owns the injector.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "rdmakit/fault.hpp"
#include "transport/fault/fault_cq.hpp"
#include "transport/provider.hpp"

namespace rdmakit::fault {

class FaultContext final : public detail::ContextProvider {
 public:
  FaultContext(Config config, std::shared_ptr<Context> inner)
      : ContextProvider(std::move(config), inner->identity()), inner_(std::move(inner)) {}

  std::string_view transport() const noexcept override { return config().transport; }
  Capabilities capabilities() const override { return inner_->capabilities(); }
  // Regions are the inner ones as they are: the inner transport checks keys, bounds and rights.
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size,
                                                        Access access) override {
    return inner_->register_memory(data, size, access);
  }
  Result<std::shared_ptr<MemoryRegion>> register_device_memory(void* data, std::size_t size, Access access,
                                                               const detail::cuda::PointerInfo&) override {
    return inner_->register_memory(data, size, access, MemoryKind::Cuda);
  }
  Result<std::shared_ptr<MemoryRegion>> allocate(std::size_t size, Access access) override {
    return inner_->allocate(size, access);
  }
  Result<std::shared_ptr<CompletionQueue>> create_cq(std::size_t depth) override;
  Result<std::shared_ptr<Listener>> listen(std::string_view address) override;
  Result<std::shared_ptr<Connection>> connect(std::string_view address,
                                              const ConnectOptions& options) override;
  std::vector<ConnectionStats> diagnostics() const override;
  std::size_t live_registrations() const override { return inner_->live_registrations(); }

  Injector& injector() noexcept { return injector_; }

  // For connect and accept: the inner queues behind `options` (new ones where empty), and the wrapping
  // of the inner connection made with them.
  struct Queues {
    std::shared_ptr<FaultCompletionQueue> send, recv;
    ConnectOptions inner;
  };
  Result<Queues> queues_for(const ConnectOptions& options);
  std::shared_ptr<Connection> wrap(std::shared_ptr<Connection> inner, const Queues& queues);

 private:
  Result<std::shared_ptr<FaultCompletionQueue>> own_queue(const std::shared_ptr<CompletionQueue>& given,
                                                          const char* which, std::uint32_t depth);
  // A connect rule, if one fires: sleeps for Delay; an error for Fail and Drop.
  Result<std::optional<Rule>> connect_rule();

  std::shared_ptr<Context> inner_;
  Injector injector_;
  mutable std::mutex mutex_;
  std::vector<std::weak_ptr<Connection>> connections_;  // for diagnostics()
};

}  // namespace rdmakit::fault
