// The tcp transport's own options: declared in its table (options.cpp), set by name (Options::set) or
// RDMAKIT_<NAME>, carried in Config::transport_options and resolved here when a context opens.
#pragma once

#include <chrono>

#include "core/option_table.hpp"

namespace rdmakit::tcp {

struct TcpOptions {
  std::chrono::milliseconds handshake_timeout{};  // an accepted peer must say hello within this
};

const options::Table& tcp_option_table();
// The options `config` carries for tcp, over the table's defaults.
Result<TcpOptions> resolve_tcp_options(const Config& config);

}  // namespace rdmakit::tcp
