// The tcp transport's context and listener.
#pragma once

#include <atomic>
#include <memory>

#include "core/registration_table.hpp"
#include "rdmakit/context.hpp"
#include "transport/tcp/engine.hpp"

namespace rdmakit::tcp {

class TcpContext final : public Context {
 public:
  static Result<std::shared_ptr<Context>> open(const Config& config);
  ~TcpContext() override;

  std::string_view transport() const noexcept override { return "tcp"; }
  Capabilities capabilities() const override;
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* data, std::size_t size, Access access) override;
  Result<std::shared_ptr<CompletionQueue>> create_cq(std::size_t depth) override;
  Result<std::shared_ptr<Listener>> listen(std::string_view address) override;
  Result<std::shared_ptr<Connection>> connect(std::string_view address, const ConnectOptions& options) override;
  std::vector<ConnectionStats> diagnostics() const override;

  RegistrationTable& table() noexcept { return *table_; }
  Engine& engine() noexcept { return *engine_; }
  std::uint32_t next_connection_number() noexcept { return next_connection_.fetch_add(1) & 0xffffff; }
  // Tests: where the connection counter continues, to force its wrap-around.
  void set_next_connection_number_for_testing(std::uint64_t next) noexcept { next_connection_.store(next); }

  TcpContext(Config config, std::unique_ptr<Engine> engine);

 private:
  std::shared_ptr<RegistrationTable> table_;
  std::atomic<std::uint64_t> next_connection_{1};
  std::unique_ptr<Engine> engine_;
};

}  // namespace rdmakit::tcp
