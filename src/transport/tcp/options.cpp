#include "transport/tcp/options.hpp"

namespace rdmakit::tcp {
namespace {

using Table = options::OptionTable<TcpOptions, options::NoGiven>;

Result<void> check(TcpOptions& o, const options::SetOptions&) {
  if (o.handshake_timeout.count() == 0)
    return std::unexpected(options::bad_option("handshake_timeout_ms", "must be at least 1"));
  return {};
}

const Table& table() {
  static const Table table(
      "tcp",
      {options::option(
          "handshake_timeout_ms", "2000",
          "tcp: a peer that connects to a listener must complete its hello within this, or is dropped",
          "milliseconds", &TcpOptions::handshake_timeout)},
      check);
  return table;
}

}  // namespace

const options::Table& tcp_option_table() { return table(); }

Result<TcpOptions> resolve_tcp_options(const Config& config) {
  return table().resolve({}, nullptr, options::Sources{&config.transport_options, false});
}

}  // namespace rdmakit::tcp
