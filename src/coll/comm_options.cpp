#include "coll/comm_options.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "bootstrap/auth.hpp"
#include "coll/mesh.hpp"
#include "core/fd.hpp"
#include "core/log.hpp"
#include "core/net.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/transports.hpp"

namespace rdmakit::coll {
// Found by the option table through argument-dependent lookup.
bool parse_value(std::string_view text, Algorithm& out) {
  if (text == "auto") return out = Algorithm::Auto, true;
  if (text == "ring") return out = Algorithm::Ring, true;
  if (text == "rd") return out = Algorithm::RecursiveDoubling, true;
  if (text == "hd") return out = Algorithm::HalvingDoubling, true;
  if (text == "shared") return out = Algorithm::Shared, true;
  return false;
}
std::string print_value(Algorithm algorithm) {
  return algorithm == Algorithm::Ring                ? "ring"
         : algorithm == Algorithm::RecursiveDoubling ? "rd"
         : algorithm == Algorithm::HalvingDoubling   ? "hd"
         : algorithm == Algorithm::Shared            ? "shared"
                                                     : "auto";
}
bool parse_value(std::string_view text, Hierarchy& out) {
  if (text == "auto") return out = Hierarchy::Auto, true;
  if (text == "on") return out = Hierarchy::On, true;
  if (text == "off") return out = Hierarchy::Off, true;
  return false;
}
std::string print_value(Hierarchy hierarchy) {
  return hierarchy == Hierarchy::On ? "on" : hierarchy == Hierarchy::Off ? "off" : "auto";
}
}  // namespace rdmakit::coll

namespace rdmakit::coll::detail {
namespace {

// What the coll table itself resolves: the RDMAKIT_COLL_* options. The transport, listen address, job
// secret and bootstrap timeout are the core's and the bootstrap's options, resolved by their tables.
struct CollConfig {
  std::optional<std::string> local_transport;  // unset: a same-host transport (shm), else the network one
  std::chrono::milliseconds timeout{};
  std::chrono::microseconds spin{};
  std::optional<std::size_t> chunk_bytes;  // unset: by fabric (Exchange::chunk_for)
  std::uint32_t slots = 0;
  Algorithm algorithm = Algorithm::Auto;
  Hierarchy hierarchical = Hierarchy::Auto;
  std::optional<std::string> host_id;  // unset: hostname + network namespace
};

using options::option;
using C = CollConfig;
using O = CommOptions;

std::vector<options::Spec<C, O>> specs() {
  return {
      option("coll_local_transport", nullptr,
             "collectives: transport between ranks of one host; unset = the first built transport "
             "that reaches only this host (shm), else the network transport",
             "a transport name", &C::local_transport, &O::local_transport),
      option("coll_timeout_ms", "60000", "collectives: one collective fails after this", "milliseconds",
             &C::timeout, &O::timeout),
      option("coll_spin_us", "5000",
             "collectives: a waiting rank polls (yielding its core) this long before it "
             "sleeps; 0 sleeps at once",
             "microseconds", &C::spin, &O::spin),
      option("coll_chunk_bytes", nullptr,
             "collectives: pipeline unit and staging slot size (a multiple of 64, up to 1 GiB); unset = "
             "512 KiB between ranks of one host over a same-host transport (shm), 128 KiB over the "
             "network transport",
             "an integer", &C::chunk_bytes, &O::chunk_bytes),
      option("coll_slots", "4", "collectives: chunks in flight per peer (1..256)", "an integer", &C::slots,
             &O::slots),
      option("coll_algo", "auto",
             "collectives: allreduce algorithm: auto, ring, rd (recursive doubling), hd "
             "(halving-doubling) or shared (loads and stores in memory every rank maps: one host "
             "over shm; elsewhere auto)",
             "auto, ring, rd, hd or shared", &C::algorithm, &O::algorithm),
      option("coll_hierarchical", "auto",
             "collectives: allreduce reduces inside each host, runs coll_algo among one leader per "
             "host, then broadcasts inside each host: auto (when ranks share hosts and there are "
             "several hosts), on or off",
             "auto, on or off", &C::hierarchical, &O::hierarchical),
      option("coll_host_id", nullptr,
             "collectives: this rank's host as peers compare it; unset = hostname + "
             "network namespace",
             "text", &C::host_id, &O::host_id),
  };
}

Result<void> check(C& c, const options::SetOptions&) {
  auto bad = [](const char* name, const std::string& why) {
    return std::unexpected(options::bad_option(name, why));
  };
  if (c.timeout.count() == 0) return bad("coll_timeout_ms", "must be at least 1");
  if (c.chunk_bytes && (*c.chunk_bytes < 64 || *c.chunk_bytes % 64 != 0 || *c.chunk_bytes > (1u << 30)))
    return bad("coll_chunk_bytes",
               "must be a multiple of 64 up to 1 GiB, got " + std::to_string(*c.chunk_bytes));
  if (c.slots == 0 || c.slots > 256)
    return bad("coll_slots", "must be 1..256, got " + std::to_string(c.slots));
  return {};
}

const options::OptionTable<C, O>& table() {
  static const options::OptionTable<C, O> table("coll", specs(), check);
  return table;
}

// Same-host peers use the first built transport that reaches only this host (Capabilities::same_host_only)
// and opens here; without one they use the network transport. No transport is named here, so a new
// same-host transport needs no change.
std::string default_local_transport(const std::string& network) {
  std::string why;
  for (const auto& info : built_transports()) {
    if (info.wraps_inner || info.name == network) continue;
    auto probe = Context::open(Options{.transport = info.name});
    if (probe && (*probe)->capabilities().same_host_only) return info.name;
    if (!probe) why += "; " + info.name + ": " + probe.error().message();
  }
  log::info("coll", "no same-host transport opens here" + why + "; same-host peers use " + network);
  return network;
}

}  // namespace

const options::Table& coll_option_table() { return table(); }

Result<CommConfig> resolve_options(const CommOptions& given) {
  auto coll = table().resolve(given);
  if (!coll) return std::unexpected(coll.error());
  CommConfig o{.timeout = coll->timeout,
               .spin = coll->spin,
               .chunk_bytes = coll->chunk_bytes,
               .slots = coll->slots,
               .algorithm = coll->algorithm,
               .hierarchical = coll->hierarchical,
               .key_prefix = given.key_prefix};
  if (given.network_transport) {
    o.network_transport = *given.network_transport;
  } else {
    auto core = resolve_config({});
    if (!core) return std::unexpected(core.error());
    o.network_transport = core->transport;
  }
  // The transports' own listen_address default is loopback; the mesh leaves it to them unless one was named.
  auto listen = named_listen_address(given);
  if (!listen) return std::unexpected(listen.error());
  o.listen_address = listen->value_or("");
  if (given.bootstrap_timeout) {
    o.bootstrap_timeout = *given.bootstrap_timeout;
  } else {
    auto timeout = bootstrap::bootstrap_timeout();
    if (!timeout) return std::unexpected(timeout.error());
    o.bootstrap_timeout = *timeout;
  }
  o.local_transport =
      coll->local_transport ? *coll->local_transport : default_local_transport(o.network_transport);
  o.host_id = coll->host_id ? *coll->host_id : default_host_id();
  auto secret = bootstrap::auth::job_secret(given.job_secret.value_or(""));
  if (!secret) return std::unexpected(secret.error());
  o.job_secret = std::move(*secret);
  return o;
}

Result<std::optional<std::string>> named_listen_address(const CommOptions& given) {
  options::SetOptions set;
  auto core = options::resolve_config(Options{.listen_address = given.listen_address}, set);
  if (!core) return std::unexpected(core.error());
  if (!set.contains("listen_address")) return std::optional<std::string>();
  return std::optional<std::string>(core->listen_address);
}

std::string route_address(const std::string& host, std::uint16_t port) {
  auto address = net::resolve(host, port, AF_INET);
  if (!address) return {};
  Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  if (!fd || ::connect(fd.get(), address->get(), address->length) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0)
    return {};
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return text;
}

}  // namespace rdmakit::coll::detail
