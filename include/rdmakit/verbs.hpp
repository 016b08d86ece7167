// What only the verbs transport has: the registration cache's statistics and the devices rdma-core
// sees (for rdmakit-info). These calls load libibverbs on demand like the transport itself; on a machine
// without rdma-core they return Errc::Unavailable naming what to install.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rdmakit/context.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit::verbs {

struct RegistrationCacheStats {
  bool enabled = true;             // Config::registration_cache
  std::uint64_t hits = 0;          // register_memory() calls served by a live registration covering the range
  std::uint64_t misses = 0;        // calls that registered (ibv_reg_mr)
  std::uint64_t entries = 0;       // live registrations
  std::uint64_t pinned_bytes = 0;  // bytes those pin
  std::uint64_t registrations = 0;
  std::uint64_t deregistrations = 0;
  std::chrono::nanoseconds registration_time{};  // total time spent in ibv_reg_mr
};

// Errc::InvalidArgument when `context` is not a verbs context.
RDMAKIT_API Result<RegistrationCacheStats> registration_cache_stats(const Context& context);

struct GidInfo {
  std::uint32_t index = 0;
  std::string gid{};   // "0000:0000:0000:0000:0000:ffff:a9fe:0701"
  std::string type{};  // "IB", "RoCE v1", "RoCE v2"
  std::string ipv4{};  // for IPv4-mapped GIDs
};

struct PortInfo {
  std::uint32_t number = 0;
  std::string state{};           // "ACTIVE", "DOWN", ...
  std::string link_layer{};      // "Ethernet" or "InfiniBand"
  std::uint32_t active_mtu = 0;  // bytes
  std::uint32_t max_mtu = 0;
  std::uint16_t lid = 0;
  std::uint32_t max_msg_size = 0;
  std::vector<GidInfo> gids{};
  std::int32_t default_gid_index = -1;  // what a context with gid_index = -1 would use
};

struct DeviceInfo {
  std::string name{};
  std::string firmware{};
  std::uint32_t vendor_id = 0;
  std::uint32_t vendor_part_id = 0;
  std::uint64_t max_mr_size = 0;
  std::uint32_t max_qp = 0;
  std::uint32_t max_qp_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t max_cq = 0;
  std::uint32_t max_cqe = 0;
  std::uint32_t max_mr = 0;
  std::uint32_t max_qp_rd_atom = 0;
  std::string atomic_cap{};  // "none", "HCA" (atomic among HCAs), "global" (also against the CPU)
  std::vector<PortInfo> ports{};
};

// Every device rdma-core sees; an empty list when there is none.
RDMAKIT_API Result<std::vector<DeviceInfo>> list_devices();

}  // namespace rdmakit::verbs
