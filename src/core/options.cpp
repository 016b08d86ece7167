#include "rdmakit/options.hpp"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <limits>

#include "core/log.hpp"

namespace rdmakit {
namespace {

// ---- Parsing and printing of each value type -------------------------------------------------------
template <typename Int>
bool parse_value(std::string_view text, Int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}
bool parse_value(std::string_view text, std::string& out) {
  out = std::string(text);
  return true;
}
bool parse_value(std::string_view text, bool& out) {
  if (text == "1" || text == "yes" || text == "on" || text == "true") return out = true, true;
  if (text == "0" || text == "no" || text == "off" || text == "false") return out = false, true;
  return false;
}
template <typename Rep, typename Period>
bool parse_value(std::string_view text, std::chrono::duration<Rep, Period>& out) {
  Rep count{};
  if (!parse_value(text, count) || count < 0) return false;
  out = std::chrono::duration<Rep, Period>(count);
  return true;
}
bool parse_value(std::string_view text, WaitMode& out) {
  if (text == "spin") return out = WaitMode::Spin, true;
  if (text == "block") return out = WaitMode::Block, true;
  if (text == "hybrid") return out = WaitMode::Hybrid, true;
  return false;
}

template <typename Int>
std::string print_value(Int value) { return std::to_string(value); }
std::string print_value(const std::string& value) { return value; }
std::string print_value(bool value) { return value ? "yes" : "no"; }
template <typename Rep, typename Period>
std::string print_value(std::chrono::duration<Rep, Period> value) { return std::to_string(value.count()); }
std::string print_value(WaitMode mode) {
  return mode == WaitMode::Spin ? "spin" : mode == WaitMode::Block ? "block" : "hybrid";
}

// ---- The option table ---------------------------------------------------------------------------
struct Spec {
  const char* name;
  const char* default_value;
  const char* doc;
  const char* expected;  // what a valid value looks like, for error messages
  std::function<bool(Config&, std::string_view)> parse;
  std::function<bool(Config&, const Options&)> from_code;  // true when set in code
  std::function<std::string(const Config&)> print;
};

template <typename T>
Spec make_spec(const char* name, const char* default_value, const char* doc, const char* expected,
               std::optional<T> Options::*option, T Config::*field) {
  return Spec{name, default_value, doc, expected,
              [field](Config& c, std::string_view text) { return parse_value(text, c.*field); },
              [option, field](Config& c, const Options& o) {
                if (!(o.*option)) return false;
                c.*field = *(o.*option);
                return true;
              },
              [field](const Config& c) { return print_value(c.*field); }};
}

// The job secret: like any string option, but never printed (rdmakit-info --config shows whether it is set).
Spec secret_spec() {
  Spec spec = make_spec("job_secret", "",
                        "secret shared by a job's processes (at least 16 characters): store clients and "
                        "collective connections prove it; empty = unauthenticated, loopback-only store",
                        "text", &Options::job_secret, &Config::job_secret);
  spec.print = [](const Config& c) { return std::string(c.job_secret.empty() ? "" : "(set)"); };
  return spec;
}

const std::vector<Spec>& specs() {
  using O = Options;
  using C = Config;
  static const std::vector<Spec> table = {
      make_spec("transport", "tcp", "transport to open: tcp, shm, verbs, or fault:<inner> for tests", "a name",
                &O::transport, &C::transport),
      make_spec("name", "", "this context's name as peers see it; empty = <hostname>:<pid>", "text", &O::name,
                &C::name),
      make_spec("listen_address", "127.0.0.1:0", "where listen() binds when given no address (loopback only)",
                "host:port", &O::listen_address, &C::listen_address),
      make_spec("device", "", "verbs: RDMA device to use (e.g. rxe0); empty = the first with an active port",
                "a device name", &O::device, &C::device),
      make_spec("port", "1", "verbs: port number on the device", "an integer", &O::port, &C::port),
      make_spec("gid_index", "-1", "verbs: GID index; -1 = pick a RoCEv2 GID (IPv4-mapped first)", "an integer",
                &O::gid_index, &C::gid_index),
      make_spec("mtu", "0", "verbs: path MTU in bytes (256..4096); 0 = the port's active MTU", "an integer",
                &O::mtu, &C::mtu),
      make_spec("timeout_ms", "4000", "a peer that stays silent this long fails pending operations",
                "milliseconds", &O::timeout, &C::timeout),
      make_spec("rnr_timeout_ms", "1000", "a SEND finding no posted receive this long fails (RNR retry exceeded)",
                "milliseconds", &O::rnr_timeout, &C::rnr_timeout),
      make_spec("connect_timeout_ms", "10000", "connect() gives up after this", "milliseconds",
                &O::connect_timeout, &C::connect_timeout),
      make_spec("handshake_timeout_ms", "2000",
                "tcp: a peer that connects to a listener must complete its hello within this, or is dropped",
                "milliseconds", &O::handshake_timeout, &C::handshake_timeout),
      make_spec("wait_mode", "hybrid", "how waits wait: spin, block (sleep in the kernel) or hybrid",
                "spin, block or hybrid", &O::wait_mode, &C::wait_mode),
      make_spec("spin_us", "50", "hybrid waits spin this long before sleeping", "microseconds", &O::spin,
                &C::spin),
      make_spec("cq_depth", "4096", "entries of a completion queue created without a depth", "an integer",
                &O::cq_depth, &C::cq_depth),
      make_spec("send_queue_depth", "1024", "operations a connection can have outstanding", "an integer",
                &O::send_queue_depth, &C::send_queue_depth),
      make_spec("recv_queue_depth", "1024", "receives a connection can have posted", "an integer",
                &O::recv_queue_depth, &C::recv_queue_depth),
      make_spec("max_sge", "16", "scatter-gather entries per operation", "an integer", &O::max_sge, &C::max_sge),
      make_spec("inline_size", "64", "verbs: WRITE/SEND payloads up to this many bytes are posted inline",
                "an integer", &O::inline_size, &C::inline_size),
      make_spec("registration_cache", "yes", "verbs: reuse the registration of the same or a covering range",
                "yes or no", &O::registration_cache, &C::registration_cache),
      make_spec("log_level", "warn", "least severe log messages shown: error, warn, info, debug",
                "error, warn, info or debug", &O::log_level, &C::log_level),
      secret_spec(),
      make_spec("store_max_bytes", "67108864", "rendezvous store: total bytes of keys and values it holds",
                "an integer", &O::store_max_bytes, &C::store_max_bytes),
      make_spec("store_max_request_bytes", "4194304", "rendezvous store: largest key + value of one request",
                "an integer", &O::store_max_request_bytes, &C::store_max_request_bytes),
      make_spec("store_max_client_buffer_bytes", "8388608",
                "rendezvous store: unread replies held for one client before it is dropped", "an integer",
                &O::store_max_client_buffer_bytes, &C::store_max_client_buffer_bytes),
      make_spec("store_max_clients", "4096", "rendezvous store: clients connected at once", "an integer",
                &O::store_max_clients, &C::store_max_clients),
      make_spec("shm_allowed_uids", "",
                "shm: uids besides our own that may connect to us and that we connect to, comma-separated; "
                "empty = our own uid only (anyone allowed can read and write our remote-writable memory)",
                "uids separated by commas", &O::shm_allowed_uids, &C::shm_allowed_uids),
  };
  return table;
}

std::string env_name(std::string_view name) {
  std::string env = "RDMAKIT_";
  for (char c : name) env += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

std::string default_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

Result<void> check_ranges(const Config& config) {
  auto bad = [](const char* name, const std::string& why) {
    return fail(Errc::InvalidArgument, std::string("option ") + name + " (" + env_name(name) + "): " + why);
  };
  if (config.transport.empty()) return bad("transport", "must not be empty");
  if (config.cq_depth == 0) return bad("cq_depth", "must be at least 1");
  if (config.send_queue_depth == 0) return bad("send_queue_depth", "must be at least 1");
  if (config.recv_queue_depth == 0) return bad("recv_queue_depth", "must be at least 1");
  if (config.max_sge == 0) return bad("max_sge", "must be at least 1");
  if (config.timeout.count() == 0) return bad("timeout_ms", "must be at least 1");
  if (config.handshake_timeout.count() == 0) return bad("handshake_timeout_ms", "must be at least 1");
  if (config.mtu != 0 && config.mtu != 256 && config.mtu != 512 && config.mtu != 1024 && config.mtu != 2048 &&
      config.mtu != 4096)
    return bad("mtu", "must be 0, 256, 512, 1024, 2048 or 4096, got " + std::to_string(config.mtu));
  if (!config.job_secret.empty() && config.job_secret.size() < 16)
    return bad("job_secret", "must be at least 16 characters (got " + std::to_string(config.job_secret.size()) + ")");
  if (config.store_max_request_bytes < 64) return bad("store_max_request_bytes", "must be at least 64");
  if (config.store_max_client_buffer_bytes < config.store_max_request_bytes + 64)
    return bad("store_max_client_buffer_bytes", "must exceed store_max_request_bytes by at least 64");
  if (config.store_max_clients == 0) return bad("store_max_clients", "must be at least 1");
  if (config.shm_allowed_uids.find_first_not_of("0123456789,") != std::string::npos ||
      config.shm_allowed_uids.find(",,") != std::string::npos || config.shm_allowed_uids.starts_with(',') ||
      config.shm_allowed_uids.ends_with(','))
    return bad("shm_allowed_uids", "must be uids separated by commas, got '" + config.shm_allowed_uids + "'");
  LogLevel level;
  if (!log::parse_level(config.log_level, level))
    return bad("log_level", "must be error, warn, info or debug, got '" + config.log_level + "'");
  return {};
}

}  // namespace

Result<Config> resolve_config(const Options& options) {
  Config config;
  for (const Spec& spec : specs()) {
    if (!spec.parse(config, spec.default_value))
      return fail(Errc::InvalidArgument, std::string("bad built-in default for option ") + spec.name);
    if (spec.from_code(config, options)) continue;
    if (const char* env = std::getenv(env_name(spec.name).c_str())) {
      if (!spec.parse(config, env))
        return fail(Errc::InvalidArgument, "option " + std::string(spec.name) + ": " + env_name(spec.name) + "='" +
                                               env + "' is not valid; expected " + spec.expected);
    }
  }
  if (config.name.empty()) config.name = default_name();
  if (auto ok = check_ranges(config); !ok) return std::unexpected(ok.error());
  return config;
}

std::vector<OptionInfo> describe_options(const Config& config) {
  std::vector<OptionInfo> infos;
  for (const Spec& spec : specs())
    infos.push_back(OptionInfo{spec.name, env_name(spec.name), spec.print(config), spec.default_value, spec.doc});
  return infos;
}

}  // namespace rdmakit
