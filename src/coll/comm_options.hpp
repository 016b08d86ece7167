// The collectives' options: their own table in the one options system (core/option_table.hpp), and
// CommOptions resolved against it (set in code > RDMAKIT_<NAME> > default).
#pragma once

#include "core/option_table.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::coll::detail {

// CommOptions with every field decided.
struct CommConfig {
  std::string network_transport;
  std::string local_transport;
  std::chrono::milliseconds timeout{};
  std::chrono::milliseconds bootstrap_timeout{};
  std::chrono::microseconds spin{};
  std::optional<std::size_t> chunk_bytes;  // unset: by fabric (Exchange::chunk_for)
  std::uint32_t slots = 0;
  Algorithm algorithm = Algorithm::Auto;
  Hierarchy hierarchical = Hierarchy::Auto;
  std::string host_id;
  std::string listen_address;  // empty: the network transport's default
  std::string key_prefix;
  std::string job_secret;
};

Result<CommConfig> resolve_options(const CommOptions& given);
// The network transport's listen address when one was named: CommOptions::listen_address set in code, else
// the core's option listen_address (RDMAKIT_LISTEN_ADDRESS) through its table; nullopt when left to the
// transport's default.
Result<std::optional<std::string>> named_listen_address(const CommOptions& given);
const options::Table& coll_option_table();

// The local address of the interface that routes to `host` (no packet is sent); empty when unknown.
std::string route_address(const std::string& host, std::uint16_t port);

}  // namespace rdmakit::coll::detail
