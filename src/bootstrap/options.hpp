// The bootstrap layer's options (rendezvous store, launch): its own table in the one options system
// (core/option_table.hpp), listed by describe_options() and `rdmakit-info --config`.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "core/option_table.hpp"
#include "rdmakit/bootstrap.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::bootstrap {

struct BootstrapConfig {
  std::chrono::milliseconds timeout{};      // bootstrap_timeout_ms: how long to wait for a missing rank
  std::optional<std::string> store_addr{};  // store_addr: "host:port" of the store (used by detect_launch)
  std::string job_secret{};                 // job_secret: never logged or printed
  bool insecure = false;                    // insecure: allow a non-loopback service without a job secret
  std::uint64_t store_max_bytes = 0;
  std::uint64_t store_max_request_bytes = 0;
  std::uint64_t store_max_client_buffer_bytes = 0;
  std::uint32_t store_max_clients = 0;
};

// Set in code (tests); anything empty comes from the environment or the default.
struct BootstrapOptions {
  std::optional<std::chrono::milliseconds> timeout{};
  std::optional<std::string> store_addr{};
  std::optional<std::string> job_secret{};
  std::optional<bool> insecure{};
  std::optional<std::uint64_t> store_max_bytes{};
  std::optional<std::uint64_t> store_max_request_bytes{};
  std::optional<std::uint64_t> store_max_client_buffer_bytes{};
  std::optional<std::uint32_t> store_max_clients{};
};

Result<BootstrapConfig> resolve_bootstrap_options(const BootstrapOptions& given = {});

// detect_launch(env) with the options already resolved: the store address is config.store_addr when set
// (in code, or RDMAKIT_STORE_ADDR through the option table), never a variable read through `env`.
Result<LaunchInfo> detect_launch(const EnvLookup& env, const BootstrapConfig& config);
const options::Table& bootstrap_option_table();

}  // namespace rdmakit::bootstrap
