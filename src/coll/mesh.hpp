// Communicator setup: the ranks meet in the store, open a transport per kind of neighbour (same host:
// local transport; other hosts: network transport), register their staging memory once, publish their
// listeners' addresses, and connect every pair of ranks. Staging descriptors never go through the store:
// each pair swaps them inside the handshake that proves the job secret (handshake.hpp), so only a proven
// rank ever learns where it may write.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "coll/exchange.hpp"
#include "rdmakit/bootstrap.hpp"

namespace rdmakit::coll::detail {

struct MeshConfig {
  std::string network_transport;
  std::string local_transport;  // equal to network_transport: one fabric for every peer
  std::string listen_address;   // network transport's listen address; empty: its default
  std::string host_id;
  std::string key_prefix;
  std::chrono::milliseconds bootstrap_timeout{};
  // The job secret (empty: none). build_mesh turns it into the key every connection's handshake proves:
  // without a job secret, the per-user secret on one host over loopback, else an error unless insecure.
  std::string secret;
};

struct MeshInfo {
  int local_rank = 0;
  int local_size = 1;
  std::string transports;    // e.g. "shm+tcp"
  std::vector<int> host_of;  // by rank: its host, numbered densely (number_hosts())
};

Result<MeshInfo> build_mesh(bootstrap::Store& store, const MeshConfig& config, Exchange& exchange);

// hostname + network namespace: ranks in different namespaces of one machine are different hosts
// (they cannot share a tcp loopback, and tests model hosts that way).
std::string default_host_id();

}  // namespace rdmakit::coll::detail
