// Reading the launcher's environment: torchrun, Open MPI's mpirun, Slurm's srun.
#include <charconv>
#include <cstdlib>

#include "bootstrap/options.hpp"
#include "rdmakit/bootstrap.hpp"

namespace rdmakit::bootstrap {
namespace {

Result<int> read_int(const EnvLookup& env, std::string_view name, int fallback, bool required) {
  auto text = env(name);
  if (!text) {
    if (required) return fail(Errc::InvalidArgument, "bootstrap: " + std::string(name) + " is not set");
    return fallback;
  }
  int value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < 0)
    return fail(Errc::InvalidArgument,
                "bootstrap: " + std::string(name) + "='" + *text + "' is not a non-negative integer");
  return value;
}

// "host:port" -> host, port. The last colon separates, so a bracketless IPv6 host is not supported.
Result<void> parse_host_port(std::string_view text, std::string_view what, LaunchInfo& info) {
  std::size_t colon = text.rfind(':');
  int port = 0;
  if (colon == std::string_view::npos || colon == 0 ||
      std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc() ||
      port <= 0 || port > 65535)
    return fail(Errc::InvalidArgument,
                "bootstrap: " + std::string(what) + "='" + std::string(text) + "' is not host:port");
  info.store_host = std::string(text.substr(0, colon));
  info.store_port = static_cast<std::uint16_t>(port);
  return {};
}

// The store address, in the order the header documents. Option store_addr comes from the resolved
// options (set in code or RDMAKIT_STORE_ADDR, read by the option table); the rest from the launcher's `env`.
Result<void> resolve_store(const EnvLookup& env, const BootstrapConfig& config, LaunchInfo& info,
                           std::string default_host) {
  if (config.store_addr)
    return parse_host_port(*config.store_addr, "option store_addr (RDMAKIT_STORE_ADDR)", info);
  auto master = env("MASTER_ADDR");
  auto port = env("MASTER_PORT");
  if (master && port) return parse_host_port(*master + ":" + *port, "MASTER_ADDR:MASTER_PORT", info);
  if (port && !master)
    return fail(Errc::InvalidArgument, "bootstrap: MASTER_PORT is set but MASTER_ADDR is not");
  info.store_host = master ? *master : std::move(default_host);
  info.store_port = default_store_port(info.job_id);
  return {};
}

Result<LaunchInfo> from_torchrun(const EnvLookup& env, const BootstrapConfig& config) {
  LaunchInfo info{.launcher = "torchrun"};
  auto rank = read_int(env, "RANK", 0, true);
  auto size = read_int(env, "WORLD_SIZE", 0, true);
  if (!rank || !size) return std::unexpected(!rank ? rank.error() : size.error());
  auto local = read_int(env, "LOCAL_RANK", *rank, false);
  if (!local) return std::unexpected(local.error());
  info.rank = *rank, info.world_size = *size, info.local_rank = *local;
  info.job_id = env("TORCHELASTIC_RUN_ID").value_or("");
  auto local_size = read_int(env, "LOCAL_WORLD_SIZE", 0, false);
  if (!local_size) return std::unexpected(local_size.error());
  info.local_size = *local_size;
  if (!env("MASTER_ADDR") || !env("MASTER_PORT"))
    if (!config.store_addr)
      return fail(Errc::InvalidArgument,
                  "bootstrap: torchrun-style launch (RANK set) needs MASTER_ADDR and "
                  "MASTER_PORT (or option store_addr, RDMAKIT_STORE_ADDR)");
  if (auto ok = resolve_store(env, config, info, "127.0.0.1"); !ok) return std::unexpected(ok.error());
  return info;
}

Result<LaunchInfo> from_mpirun(const EnvLookup& env, const BootstrapConfig& config) {
  LaunchInfo info{.launcher = "mpirun"};
  auto rank = read_int(env, "OMPI_COMM_WORLD_RANK", 0, true);
  auto size = read_int(env, "OMPI_COMM_WORLD_SIZE", 0, true);
  if (!rank || !size) return std::unexpected(!rank ? rank.error() : size.error());
  auto local = read_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", *rank, false);
  if (!local) return std::unexpected(local.error());
  info.rank = *rank, info.world_size = *size, info.local_rank = *local;
  // Every rank of one mpirun job sees the same jobid; two jobs on one host get different ports.
  auto local_size = read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 0, false);
  if (!local_size) return std::unexpected(local_size.error());
  info.local_size = *local_size;
  info.job_id = env("OMPI_MCA_ess_base_jobid").value_or(env("OMPI_MCA_orte_ess_jobid").value_or(""));
  if (auto ok = resolve_store(env, config, info, "127.0.0.1"); !ok) return std::unexpected(ok.error());
  return info;
}

Result<LaunchInfo> from_srun(const EnvLookup& env, const BootstrapConfig& config) {
  LaunchInfo info{.launcher = "srun"};
  auto rank = read_int(env, "SLURM_PROCID", 0, true);
  auto size = read_int(env, "SLURM_NTASKS", 1, false);
  if (!rank || !size) return std::unexpected(!rank ? rank.error() : size.error());
  auto local = read_int(env, "SLURM_LOCALID", *rank, false);
  if (!local) return std::unexpected(local.error());
  info.rank = *rank, info.world_size = *size, info.local_rank = *local;
  info.job_id =
      env("SLURM_JOB_ID").value_or(env("SLURM_JOBID").value_or("")) + "." + env("SLURM_STEP_ID").value_or("");
  auto nodes = read_int(env, "SLURM_JOB_NUM_NODES", 0, false);
  if (!nodes) return std::unexpected(nodes.error());
  if (*nodes == 1) info.local_size = info.world_size;
  std::string first = "127.0.0.1";
  auto list = env("SLURM_JOB_NODELIST");
  if (!list) list = env("SLURM_NODELIST");
  if (list) {
    auto hosts = expand_nodelist(*list);
    if (!hosts)
      return std::unexpected(
          Error(Errc::InvalidArgument, "bootstrap: SLURM_JOB_NODELIST: " + hosts.error().message()));
    first = hosts->front();
  }
  if (auto ok = resolve_store(env, config, info, first); !ok) return std::unexpected(ok.error());
  return info;
}

}  // namespace

namespace {
constexpr std::uint64_t kFirstStorePort = 20000;
constexpr std::uint64_t kEphemeralStart = 32768;
}  // namespace

std::uint16_t default_store_port(std::string_view job_id) noexcept {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a: stable across processes and builds
  for (char c : job_id) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  // Below Linux's default ephemeral range (32768-60999): a port in it can be held by any process's
  // outgoing connection, and then rank 0 cannot bind it (seen when a test made thousands of connections).
  return static_cast<std::uint16_t>(kFirstStorePort + hash % (kEphemeralStart - kFirstStorePort));
}

bool LaunchInfo::spans_hosts() const noexcept {
  if (local_size > 0) return local_size < world_size;
  return !(store_host.starts_with("127.") || store_host == "localhost");
}

Result<LaunchInfo> detect_launch(const EnvLookup& env, const BootstrapConfig& config) {
  Result<LaunchInfo> info = LaunchInfo{.launcher = "single"};
  if (env("RANK") && env("WORLD_SIZE"))
    info = from_torchrun(env, config);
  else if (env("OMPI_COMM_WORLD_RANK"))
    info = from_mpirun(env, config);
  else if (env("SLURM_PROCID"))
    info = from_srun(env, config);
  else if (auto ok = resolve_store(env, config, *info, "127.0.0.1"); !ok)
    return std::unexpected(ok.error());
  if (info && info->launcher == "single") info->local_size = 1;
  if (!info) return info;
  if (info->world_size < 1) return fail(Errc::InvalidArgument, "bootstrap: world size must be at least 1");
  if (info->rank >= info->world_size)
    return fail(Errc::InvalidArgument, "bootstrap: rank " + std::to_string(info->rank) +
                                           " is not below the world size " +
                                           std::to_string(info->world_size));
  return info;
}

Result<LaunchInfo> detect_launch(const EnvLookup& env) {
  auto config = resolve_bootstrap_options();
  if (!config) return std::unexpected(config.error());
  return detect_launch(env, *config);
}

Result<LaunchInfo> detect_launch() {
  return detect_launch([](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

Result<std::chrono::milliseconds> bootstrap_timeout() {
  auto config = resolve_bootstrap_options();
  if (!config) return std::unexpected(config.error());
  return config->timeout;
}

}  // namespace rdmakit::bootstrap
