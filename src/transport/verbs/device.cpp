#include "transport/verbs/device.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace rdmakit::verbs_impl {
namespace {

constexpr const char* kNoDeviceHint =
    "no RDMA device found: load the driver of your NIC, or create a Soft-RoCE device with "
    "`rdma link add rxe0 type rxe netdev <interface>` (kernel module rdma_rxe); the user-space providers "
    "come with Debian's ibverbs-providers";

GidType type_from_sysfs(const std::string& device, std::uint8_t port, std::uint32_t index, bool ethernet) {
  std::ifstream in("/sys/class/infiniband/" + device + "/ports/" + std::to_string(port) +
                   "/gid_attrs/types/" + std::to_string(index));
  std::string text;
  std::getline(in, text);
  if (text.find("v2") != std::string::npos) return GidType::RoCEv2;
  return ethernet ? GidType::RoCEv1 : GidType::IB;
}

}  // namespace

DeviceList::DeviceList(const Api& api) : api_(api) {
  list_ = api_.get_device_list(&count_);
  if (!list_) count_ = 0;
}
DeviceList::~DeviceList() {
  if (list_) api_.free_device_list(list_);
}
std::string DeviceList::names() const {
  std::string out;
  for (int i = 0; i < count_; ++i) out += (i ? ", " : "") + name(i);
  return out.empty() ? "none" : out;
}

std::string port_state_text(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}

std::vector<GidEntry> read_gids(const Api& api, ibv_context* context, const std::string& device,
                                std::uint8_t port, int table_len, bool ethernet) {
  std::vector<GidEntry> gids;
  for (int i = 0; i < table_len; ++i) {
    GidEntry entry;
    entry.index = static_cast<std::uint32_t>(i);
    ibv_gid_entry ex{};
    if (api.query_gid_ex && api.query_gid_ex(context, port, entry.index, &ex, 0, sizeof(ex)) == 0) {
      std::memcpy(entry.gid.data(), ex.gid.raw, 16);
      entry.type = ex.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::RoCEv2
                   : ex.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::RoCEv1
                                                         : GidType::IB;
    } else {
      ibv_gid gid{};
      if (api.query_gid(context, port, i, &gid) != 0) continue;
      std::memcpy(entry.gid.data(), gid.raw, 16);
      entry.type = type_from_sysfs(device, port, entry.index, ethernet);
    }
    if (!is_zero(entry.gid)) gids.push_back(entry);
  }
  return gids;
}

Result<std::shared_ptr<Device>> Device::open(const Api& api, const VerbsOptions& config) {
  DeviceList list(api);
  if (list.size() == 0) return fail(Errc::Unavailable, std::string("verbs transport: ") + kNoDeviceHint);
  if (config.port == 0 || config.port > 255)
    return fail(Errc::InvalidArgument, "option port (RDMAKIT_PORT): no port " + std::to_string(config.port));
  std::string tried;
  for (int i = 0; i < list.size(); ++i) {
    if (!config.device.empty() && list.name(i) != config.device) continue;
    ibv_context* context = api.open_device(list[i]);
    if (!context) return fail_errno("verbs transport: ibv_open_device(" + list.name(i) + ")", errno);
    std::shared_ptr<Device> device(new Device(api, context, list.name(i)));
    auto ready = device->setup(config);
    if (ready) return device;
    if (!config.device.empty()) return std::unexpected(ready.error());
    tried += "; " + ready.error().message();
  }
  if (!config.device.empty())
    return fail(Errc::NotFound, "option device (RDMAKIT_DEVICE): no RDMA device named '" + config.device +
                                    "' (devices: " + list.names() + ")");
  return fail(Errc::Unavailable,
              "verbs transport: no device has an active port " + std::to_string(config.port) + tried);
}

Result<void> Device::setup(const VerbsOptions& config) {
  port_ = static_cast<std::uint8_t>(config.port);
  if (api_.query_device(context_, &attr_) != 0) return fail_errno("ibv_query_device(" + name_ + ")", errno);
  if (port_ > attr_.phys_port_cnt)
    return fail(Errc::InvalidArgument, "option port (RDMAKIT_PORT): " + name_ + " has " +
                                           std::to_string(attr_.phys_port_cnt) + " port(s), not " +
                                           std::to_string(port_));
  if (query_port(api_, context_, port_, &port_attr_) != 0)
    return fail_errno("ibv_query_port(" + name_ + ", " + std::to_string(port_) + ")", errno);
  if (port_attr_.state != IBV_PORT_ACTIVE)
    return fail(Errc::Unavailable, "verbs transport: " + name_ + " port " + std::to_string(port_) + " is " +
                                       port_state_text(port_attr_.state) +
                                       ", not ACTIVE (is its netdev up?)");
  if (config.mtu && *config.mtu > mtu_to_bytes(port_attr_.active_mtu))
    return fail(Errc::InvalidArgument, "option mtu (RDMAKIT_MTU): " + std::to_string(*config.mtu) +
                                           " bytes, but " + name_ + " port " + std::to_string(port_) +
                                           "'s active MTU is " +
                                           std::to_string(mtu_to_bytes(port_attr_.active_mtu)));
  if (auto chosen = choose_gid(config); !chosen) return chosen;
  pd_ = api_.alloc_pd(context_);
  if (!pd_) return fail_errno("ibv_alloc_pd(" + name_ + ")", errno);
  return {};
}

Result<void> Device::choose_gid(const VerbsOptions& config) {
  auto gids = read_gids(api_, context_, name_, port_, port_attr_.gid_tbl_len, ethernet());
  if (config.gid_index) {
    for (const GidEntry& e : gids)
      if (e.index == *config.gid_index) return gid_ = e, Result<void>{};
    return fail(Errc::InvalidArgument, "option gid_index (RDMAKIT_GID_INDEX): " + name_ + " port " +
                                           std::to_string(port_) + " has no GID at index " +
                                           std::to_string(*config.gid_index));
  }
  auto chosen = verbs_impl::choose_gid(gids, ethernet());
  if (!chosen)
    return fail(Errc::Unavailable, "verbs transport: " + name_ + " port " + std::to_string(port_) +
                                       " has no usable GID (on RoCE: give its netdev an IP address)");
  gid_ = *chosen;
  return {};
}

Device::~Device() {
  if (pd_) api_.dealloc_pd(pd_);
  api_.close_device(context_);
}

}  // namespace rdmakit::verbs_impl
