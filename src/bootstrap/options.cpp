#include "bootstrap/options.hpp"

#include <vector>

namespace rdmakit::bootstrap {
namespace {

using options::option;
using C = BootstrapConfig;
using O = BootstrapOptions;
using Spec = options::Spec<C, O>;

// The job secret: a string option that is never printed (rdmakit-info --config shows whether it is set).
Spec secret_spec() {
  Spec spec =
      option("job_secret", "",
             "secret shared by a job's processes (at least 16 characters): store clients and collective "
             "connections prove it; empty = unauthenticated, loopback-only store",
             "text", &C::job_secret, &O::job_secret);
  spec.print = [](const C& c) { return std::string(c.job_secret.empty() ? "" : "(set)"); };
  return spec;
}

std::vector<Spec> specs() {
  return {
      option(
          "bootstrap_timeout_ms", "60000",
          "how long ranks wait for one that does not show up at the store (connecting, exchanging addresses)",
          "milliseconds", &C::timeout, &O::timeout),
      option(
          "store_addr", nullptr,
          "host:port of the rendezvous store; unset = MASTER_ADDR:MASTER_PORT, else derived from the launch",
          "host:port", &C::store_addr, &O::store_addr),
      secret_spec(),
      option("insecure", "no",
             "let a service listen beyond loopback without a job secret (anyone who reaches it can join); "
             "without it that is an error",
             "yes or no", &C::insecure, &O::insecure),
      option("store_max_bytes", "67108864", "rendezvous store: total bytes of keys and values it holds",
             "an integer", &C::store_max_bytes, &O::store_max_bytes),
      option("store_max_request_bytes", "4194304", "rendezvous store: largest key + value of one request",
             "an integer", &C::store_max_request_bytes, &O::store_max_request_bytes),
      option("store_max_client_buffer_bytes", "8388608",
             "rendezvous store: unread replies held for one client before it is dropped", "an integer",
             &C::store_max_client_buffer_bytes, &O::store_max_client_buffer_bytes),
      option("store_max_clients", "4096", "rendezvous store: clients connected at once", "an integer",
             &C::store_max_clients, &O::store_max_clients),
  };
}

Result<void> check(C& c, const options::SetOptions&) {
  auto bad = [](const char* name, const std::string& why) {
    return std::unexpected(options::bad_option(name, why));
  };
  if (c.timeout.count() == 0) return bad("bootstrap_timeout_ms", "must be at least 1");
  if (!c.job_secret.empty() && c.job_secret.size() < 16)
    return bad("job_secret",
               "must be at least 16 characters (got " + std::to_string(c.job_secret.size()) + ")");
  if (c.store_max_request_bytes < 64) return bad("store_max_request_bytes", "must be at least 64");
  if (c.store_max_client_buffer_bytes < c.store_max_request_bytes + 64)
    return bad("store_max_client_buffer_bytes", "must exceed store_max_request_bytes by at least 64");
  if (c.store_max_clients == 0) return bad("store_max_clients", "must be at least 1");
  return {};
}

const options::OptionTable<C, O>& table() {
  static const options::OptionTable<C, O> table("bootstrap", specs(), check);
  return table;
}

}  // namespace

Result<BootstrapConfig> resolve_bootstrap_options(const BootstrapOptions& given) {
  return table().resolve(given);
}
const options::Table& bootstrap_option_table() { return table(); }

}  // namespace rdmakit::bootstrap
