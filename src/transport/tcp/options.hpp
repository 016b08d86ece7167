// The tcp transport's own options: declared in its table (options.cpp), set by name (Options::set) or
// RDMAKIT_<NAME>, carried in Config::transport_options and resolved here when a context opens.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/option_table.hpp"

namespace rdmakit::tcp {

struct TcpOptions {
  std::chrono::milliseconds handshake_timeout{};  // an accepted peer must say hello within this
  // Device memory (the staged path): a payload bound for it is received through pinned host slots of at
  // most this many bytes, `device_ring_depth` of them in flight (core/device_inbound.hpp).
  std::uint32_t device_chunk = 4u << 20;
  std::uint32_t device_ring_depth = 2;
};

const options::Table& tcp_option_table();
// The options `config` carries for tcp, over the table's defaults.
Result<TcpOptions> resolve_tcp_options(const Config& config);

}  // namespace rdmakit::tcp
