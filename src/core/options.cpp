#include "rdmakit/options.hpp"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/option_table.hpp"
#include "core/transport_registry.hpp"

namespace rdmakit {
namespace {

using options::option;
using Spec = options::Spec<Config, Options>;

// ---- The option table ---------------------------------------------------------------------------
std::vector<Spec> specs() {
  using O = Options;
  using C = Config;
  return {
      option("transport", "tcp", "transport to open: tcp, shm, verbs, or fault:<inner> for tests", "a name",
             &C::transport, &O::transport),
      option("name", "", "this context's name as peers see it; empty = <hostname>:<pid>", "text", &C::name,
             &O::name),
      option("listen_address", "127.0.0.1:0", "where listen() binds when given no address (loopback only)",
             "host:port", &C::listen_address, &O::listen_address),
      option("timeout_ms", "4000", "a peer that stays silent this long fails pending operations",
             "milliseconds", &C::timeout, &O::timeout),
      option(
          "rnr_timeout_ms", "1000",
          "a SEND finding no posted receive this long fails (RNR retry exceeded); must be below timeout_ms "
          "(left unset: half of a timeout_ms at or below this default)",
          "milliseconds", &C::rnr_timeout, &O::rnr_timeout),
      option("connect_timeout_ms", "10000", "connect() gives up after this", "milliseconds",
             &C::connect_timeout, &O::connect_timeout),
      option("wait_mode", "hybrid", "how waits wait: spin, block (sleep in the kernel) or hybrid",
             "spin, block or hybrid", &C::wait_mode, &O::wait_mode),
      option("spin_us", "50", "hybrid waits spin this long before sleeping", "microseconds", &C::spin,
             &O::spin),
      option("cq_depth", "4096", "entries of a completion queue created without a depth", "an integer",
             &C::cq_depth, &O::cq_depth),
      option("send_queue_depth", "1024", "operations a connection can have outstanding", "an integer",
             &C::send_queue_depth, &O::send_queue_depth),
      option("recv_queue_depth", "1024", "receives a connection can have posted", "an integer",
             &C::recv_queue_depth, &O::recv_queue_depth),
      option("max_sge", "16", "scatter-gather entries per operation", "an integer", &C::max_sge, &O::max_sge),
      option("log_level", "warn", "least severe log messages shown: error, warn, info, debug",
             "error, warn, info or debug", &C::log_level, &O::log_level),
      option("gpu_path", "auto",
             "the path device memory must take: auto (the transport's), direct (GPUDirect RDMA or CUDA IPC, "
             "no CPU copy) or staged (through host memory); registration refuses another",
             "auto, direct or staged", &C::gpu_path, &O::gpu_path),
  };
}

std::string default_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

Result<void> check_ranges(Config& config, const options::SetOptions& set) {
  auto bad = [](const char* name, const std::string& why) {
    return std::unexpected(options::bad_option(name, why));
  };
  if (config.transport.empty()) return bad("transport", "must not be empty");
  if (config.cq_depth == 0) return bad("cq_depth", "must be at least 1");
  if (config.send_queue_depth == 0) return bad("send_queue_depth", "must be at least 1");
  if (config.recv_queue_depth == 0) return bad("recv_queue_depth", "must be at least 1");
  if (config.max_sge == 0) return bad("max_sge", "must be at least 1");
  if (config.gpu_path != "auto" && config.gpu_path != "direct" && config.gpu_path != "staged")
    return bad("gpu_path", "must be auto, direct or staged, got '" + config.gpu_path + "'");
  if (config.timeout.count() == 0) return bad("timeout_ms", "must be at least 1");
  // A SEND without a receive must report RNR, which it cannot once the peer counts as silent. Left at its
  // default, rnr_timeout_ms follows a shorter timeout_ms down (half of it); set, it must be below it.
  if (!set.contains("rnr_timeout_ms") && config.rnr_timeout >= config.timeout)
    config.rnr_timeout = config.timeout / 2;
  if (config.rnr_timeout >= config.timeout)
    return bad("rnr_timeout_ms",
               std::to_string(config.rnr_timeout.count()) +
                   " must be below option timeout_ms (RDMAKIT_TIMEOUT_MS) = " +
                   std::to_string(config.timeout.count()) +
                   ", or a SEND without a posted receive reports a transport timeout, not RNR");
  LogLevel level;
  if (!log::parse_level(config.log_level, level))
    return bad("log_level", "must be error, warn, info or debug, got '" + config.log_level + "'");
  return {};
}

// Fills what has no static default and checks what the table cannot check one option at a time.
Result<void> finish(Config& config, const options::SetOptions& set) {
  if (config.name.empty()) config.name = default_name();
  return check_ranges(config, set);
}

const options::OptionTable<Config, Options>& table() {
  static const options::OptionTable<Config, Options> table("core", specs(), finish);
  return table;
}

// The transports that `transport` names: "fault:verbs" names fault and verbs.
std::vector<const transport::Registration*> named_transports(std::string_view transport) {
  std::vector<const transport::Registration*> out;
  while (!transport.empty()) {
    std::string_view base = transport.substr(0, transport.find(':'));
    for (const transport::Registration& entry : transport::builtin())
      if (entry.name == base) out.push_back(&entry);
    transport.remove_prefix(std::min(transport.size(), base.size() + 1));
  }
  return out;
}

// A name set in code must be an option of the core or of a built transport: a misspelt one would
// otherwise be dropped without a word (as a misspelt variable draws a warning, this is an error).
Result<void> check_names(const NamedOptions& named) {
  std::vector<const options::Table*> tables = options::context_tables();
  for (const auto& [name, text] : named) {
    bool known = false;
    for (const options::Table* t : tables) known = known || t->declares(name);
    if (known) continue;
    std::vector<std::string> candidates;
    for (const options::Table* t : tables)
      for (const OptionInfo& info : t->declared()) candidates.push_back(info.name);
    std::string closest = options::closest_of(name, candidates);
    return fail(Errc::InvalidArgument,
                "option '" + log::printable(name) + "' set in code is no option of a context of this build" +
                    (closest.empty() ? std::string(" (rdmakit-info --config lists them)")
                                     : "; did you mean " + closest + "?"));
  }
  return {};
}

// Config::transport_options: what was set for every built transport; those of the transports opened
// must resolve now, so that a bad value fails resolve_config() as a bad core value does.
Result<void> resolve_transport_options(const Options& given, Config& config) {
  for (const transport::Registration& entry : transport::builtin())
    if (entry.options) config.transport_options.merge(entry.options->set_texts(given.named));
  for (const transport::Registration* entry : named_transports(config.transport))
    if (entry->options)
      if (auto ok = entry->options->check_named(config.transport_options); !ok) return ok;
  return {};
}

Result<Config> resolve_all(const Options& given, options::SetOptions* set) {
  if (auto ok = check_names(given.named); !ok) return std::unexpected(ok.error());
  auto config = table().resolve(given, set, options::Sources{&given.named, true});
  if (!config) return config;
  if (auto ok = resolve_transport_options(given, *config); !ok) return std::unexpected(ok.error());
  return config;
}

}  // namespace

Options& Options::set(std::string option, std::string value) {
  named.insert_or_assign(std::move(option), std::move(value));
  return *this;
}

const options::Table& options::core_table() { return table(); }

std::vector<const options::Table*> options::context_tables() {
  std::vector<const Table*> tables{&core_table()};
  for (const transport::Registration& entry : transport::builtin())
    if (entry.options) tables.push_back(entry.options);
  return tables;
}

Result<Config> resolve_config(const Options& options) { return resolve_all(options, nullptr); }

Result<Config> options::resolve_config(const Options& given, SetOptions& set) {
  return resolve_all(given, &set);
}

std::vector<OptionInfo> describe_options(const Config& config) {
  std::vector<OptionInfo> infos = table().describe(config);
  for (const transport::Registration* entry : named_transports(config.transport))
    if (entry->options) {
      auto more = entry->options->describe_named(config.transport_options);
      infos.insert(infos.end(), more.begin(), more.end());
    }
  return infos;
}

Result<std::vector<OptionInfo>> describe_options() {
  std::vector<OptionInfo> all;
  for (const options::Table* layer : options::option_tables()) {
    auto infos = layer->effective();
    if (!infos) return std::unexpected(infos.error());
    all.insert(all.end(), infos->begin(), infos->end());
  }
  return all;
}

}  // namespace rdmakit
