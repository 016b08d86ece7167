// rdmakit/verbs.hpp: registration cache statistics and device listing.
#include <arpa/inet.h>

#include <cstring>

#include "rdmakit/verbs.hpp"
#include "transport/verbs/context.hpp"
#include "transport/verbs/device.hpp"

namespace rdmakit::verbs {
namespace {

using namespace verbs_impl;

std::string atomic_text(ibv_atomic_cap cap) {
  switch (cap) {
    case IBV_ATOMIC_HCA:
      return "HCA";
    case IBV_ATOMIC_GLOB:
      return "global";
    default:
      return "none";
  }
}

PortInfo describe_port(const Api& api, ibv_context* context, const std::string& device, std::uint8_t number) {
  PortInfo port;
  port.number = number;
  ibv_port_attr attr{};
  if (query_port(api, context, number, &attr) != 0) {
    port.state = "unknown (ibv_query_port failed)";
    return port;
  }
  const bool ethernet = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  port.state = port_state_text(attr.state);
  port.link_layer = ethernet ? "Ethernet" : "InfiniBand";
  port.active_mtu = mtu_to_bytes(attr.active_mtu);
  port.max_mtu = mtu_to_bytes(attr.max_mtu);
  port.lid = attr.lid;
  port.max_msg_size = attr.max_msg_sz;
  auto gids = read_gids(api, context, device, number, attr.gid_tbl_len, ethernet);
  for (const GidEntry& e : gids) {
    GidInfo g{e.index, gid_text(e.gid), to_string(e.type), ""};
    if (auto v4 = ipv4_of(e.gid)) {
      in_addr a{htonl(*v4)};
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &a, text, sizeof(text));
      g.ipv4 = text;
    }
    port.gids.push_back(std::move(g));
  }
  if (auto chosen = choose_gid(gids, ethernet))
    port.default_gid_index = static_cast<std::int32_t>(chosen->index);
  return port;
}

DeviceInfo describe(const Api& api, ibv_context* context, const std::string& name) {
  DeviceInfo info;
  info.name = name;
  ibv_device_attr attr{};
  if (api.query_device(context, &attr) != 0) return info;
  info.firmware = attr.fw_ver;
  info.vendor_id = attr.vendor_id;
  info.vendor_part_id = attr.vendor_part_id;
  info.max_mr_size = attr.max_mr_size;
  info.max_qp = static_cast<std::uint32_t>(attr.max_qp);
  info.max_qp_wr = static_cast<std::uint32_t>(attr.max_qp_wr);
  info.max_sge = static_cast<std::uint32_t>(attr.max_sge);
  info.max_cq = static_cast<std::uint32_t>(attr.max_cq);
  info.max_cqe = static_cast<std::uint32_t>(attr.max_cqe);
  info.max_mr = static_cast<std::uint32_t>(attr.max_mr);
  info.max_qp_rd_atom = static_cast<std::uint32_t>(attr.max_qp_rd_atom);
  info.atomic_cap = atomic_text(attr.atomic_cap);
  for (std::uint8_t p = 1; p <= attr.phys_port_cnt; ++p)
    info.ports.push_back(describe_port(api, context, name, p));
  return info;
}

}  // namespace

Result<RegistrationCacheStats> registration_cache_stats(const Context& context) {
  const auto* verbs = dynamic_cast<const VerbsContext*>(&context);
  if (!verbs)
    return fail(Errc::InvalidArgument, "registration_cache_stats: the context's transport is " +
                                           std::string(context.transport()) + ", not verbs");
  CacheStats s = verbs->cache_stats();
  return RegistrationCacheStats{s.enabled,      s.hits,          s.misses,          s.entries,
                                s.pinned_bytes, s.registrations, s.deregistrations, s.registration_time};
}

Result<std::vector<DeviceInfo>> list_devices() {
  auto api = load_api();
  if (!api) return std::unexpected(api.error());
  DeviceList list(**api);
  std::vector<DeviceInfo> out;
  for (int i = 0; i < list.size(); ++i) {
    ibv_context* context = (*api)->open_device(list[i]);
    if (!context) {
      out.push_back(DeviceInfo{.name = list.name(i),
                               .firmware = "(cannot open: " + std::string(std::strerror(errno)) + ")"});
      continue;
    }
    out.push_back(describe(**api, context, list.name(i)));
    (*api)->close_device(context);
  }
  return out;
}

}  // namespace rdmakit::verbs
