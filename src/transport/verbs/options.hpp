// The verbs transport's own options: declared in its table (options.cpp), set by name (Options::set) or
// RDMAKIT_<NAME>, carried in Config::transport_options and resolved here when a context opens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/option_table.hpp"

namespace rdmakit::verbs_impl {

struct VerbsOptions {
  std::string device{};                      // empty = the first with an active port
  std::uint32_t port = 1;                    // port number on the device
  std::optional<std::uint32_t> gid_index{};  // unset = choose a RoCEv2 GID automatically
  std::optional<std::uint32_t> mtu{};      // path MTU in bytes; unset = the port's active MTU (or the peer's)
  std::uint32_t inline_size = 0;           // WRITE/SEND payloads up to this go inline
  bool registration_cache = true;          // reuse registrations of the same range
  std::uint32_t staging_chunk = 1u << 20;  // device memory without GPUDirect: bytes per staged device copy
};

const options::Table& verbs_option_table();
// The options `config` carries for verbs, over the table's defaults.
Result<VerbsOptions> resolve_verbs_options(const Config& config);

}  // namespace rdmakit::verbs_impl
