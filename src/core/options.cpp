#include "rdmakit/options.hpp"

#include <unistd.h>

#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/option_table.hpp"

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
      option("device", "", "verbs: RDMA device to use (e.g. rxe0); empty = the first with an active port",
             "a device name", &C::device, &O::device),
      option("port", "1", "verbs: port number on the device", "an integer", &C::port, &O::port),
      option("gid_index", nullptr, "verbs: GID index; unset = pick a RoCEv2 GID (IPv4-mapped first)",
             "an integer", &C::gid_index, &O::gid_index),
      option("mtu", nullptr,
             "verbs: path MTU in bytes (256, 512, 1024, 2048 or 4096); unset = the port's active MTU",
             "an integer", &C::mtu, &O::mtu),
      option("timeout_ms", "4000", "a peer that stays silent this long fails pending operations",
             "milliseconds", &C::timeout, &O::timeout),
      option(
          "rnr_timeout_ms", "1000",
          "a SEND finding no posted receive this long fails (RNR retry exceeded); must be below timeout_ms "
          "(left unset: half of a timeout_ms at or below this default)",
          "milliseconds", &C::rnr_timeout, &O::rnr_timeout),
      option("connect_timeout_ms", "10000", "connect() gives up after this", "milliseconds",
             &C::connect_timeout, &O::connect_timeout),
      option("handshake_timeout_ms", "2000",
             "tcp: a peer that connects to a listener must complete its hello within this, or is dropped",
             "milliseconds", &C::handshake_timeout, &O::handshake_timeout),
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
      option("inline_size", "64", "verbs: WRITE/SEND payloads up to this many bytes are posted inline",
             "an integer", &C::inline_size, &O::inline_size),
      option("registration_cache", "yes", "verbs: reuse the registration of the same or a covering range",
             "yes or no", &C::registration_cache, &O::registration_cache),
      option("log_level", "warn", "least severe log messages shown: error, warn, info, debug",
             "error, warn, info or debug", &C::log_level, &O::log_level),
      option("shm_allowed_uids", "",
             "shm: uids besides our own that may connect to us and that we connect to, comma-separated; "
             "empty = our own uid only (anyone allowed can read and write our remote-writable memory)",
             "uids separated by commas", &C::shm_allowed_uids, &O::shm_allowed_uids),
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
  if (config.timeout.count() == 0) return bad("timeout_ms", "must be at least 1");
  if (config.handshake_timeout.count() == 0) return bad("handshake_timeout_ms", "must be at least 1");
  if (auto mtu = config.mtu;
      mtu && *mtu != 256 && *mtu != 512 && *mtu != 1024 && *mtu != 2048 && *mtu != 4096)
    return bad("mtu", "must be 256, 512, 1024, 2048 or 4096 (or unset: the port's MTU), got " +
                          std::to_string(*mtu));
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
  if (config.shm_allowed_uids.find_first_not_of("0123456789,") != std::string::npos ||
      config.shm_allowed_uids.find(",,") != std::string::npos || config.shm_allowed_uids.starts_with(',') ||
      config.shm_allowed_uids.ends_with(','))
    return bad("shm_allowed_uids", "must be uids separated by commas, got '" + config.shm_allowed_uids + "'");
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

}  // namespace

const options::Table& options::core_table() { return table(); }

Result<Config> resolve_config(const Options& options) { return table().resolve(options); }

Result<Config> options::resolve_config(const Options& given, SetOptions& set) {
  return table().resolve(given, &set);
}

std::vector<OptionInfo> describe_options(const Config& config) { return table().describe(config); }

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
