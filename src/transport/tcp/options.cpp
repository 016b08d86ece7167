#include "transport/tcp/options.hpp"

#include <string>

namespace rdmakit::tcp {
namespace {

using Table = options::OptionTable<TcpOptions, options::NoGiven>;

Result<void> check(TcpOptions& o, const options::SetOptions&) {
  if (o.handshake_timeout.count() == 0)
    return std::unexpected(options::bad_option("handshake_timeout_ms", "must be at least 1"));
  if (o.device_chunk < 4096)
    return std::unexpected(options::bad_option(
        "device_chunk", "must be at least 4096 bytes, got " + std::to_string(o.device_chunk)));
  if (o.device_ring_depth < 2 || o.device_ring_depth > 16)
    return std::unexpected(options::bad_option(
        "device_ring_depth", "must be 2 to 16 chunks, got " + std::to_string(o.device_ring_depth)));
  return {};
}

const Table& table() {
  static const Table table(
      "tcp",
      {options::option(
           "handshake_timeout_ms", "2000",
           "tcp: a peer that connects to a listener must complete its hello within this, or is dropped",
           "milliseconds", &TcpOptions::handshake_timeout),
       options::option("device_chunk", "4194304",
                       "tcp: a payload bound for device memory is received through pinned host chunks of at "
                       "most this many bytes (a quarter of the payload, at least 64 KiB), each copied to the "
                       "device while the next one fills",
                       "an integer", &TcpOptions::device_chunk),
       options::option("device_ring_depth", "2",
                       "tcp: chunks of one payload bound for device memory in flight at once (2 to 16)",
                       "an integer", &TcpOptions::device_ring_depth)},
      check);
  return table;
}

}  // namespace

const options::Table& tcp_option_table() { return table(); }

Result<TcpOptions> resolve_tcp_options(const Config& config) {
  return table().resolve({}, nullptr, options::Sources{&config.transport_options, false});
}

}  // namespace rdmakit::tcp
