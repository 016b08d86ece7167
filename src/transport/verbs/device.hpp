// An opened RDMA device: its verbs context, one protection domain, the chosen port and GID. Shared by
// everything made from it (regions, CQs, QPs keep it alive: a child keeps its parent alive).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rdmakit/options.hpp"
#include "transport/verbs/api.hpp"
#include "transport/verbs/mapping.hpp"
#include "transport/verbs/options.hpp"

namespace rdmakit::verbs_impl {

// ibv_get_device_list as an owning handle.
class DeviceList {
 public:
  explicit DeviceList(const Api& api);
  ~DeviceList();
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
  int size() const noexcept { return count_; }
  ibv_device* operator[](int i) const noexcept { return list_[i]; }
  std::string name(int i) const { return api_.get_device_name(list_[i]); }
  std::string names() const;  // "rxe0, mlx5_0" for messages

 private:
  const Api& api_;
  ibv_device** list_ = nullptr;
  int count_ = 0;
};

// The GID table of a port with each entry's type (zero entries left out).
std::vector<GidEntry> read_gids(const Api& api, ibv_context* context, const std::string& device,
                                std::uint8_t port, int table_len, bool ethernet);
std::string port_state_text(ibv_port_state state);

class Device {
 public:
  // The device named by option device, else the first one whose port (option port) is active; with its
  // GID chosen (option gid_index, else choose_gid) and the configured MTU checked against the port.
  static Result<std::shared_ptr<Device>> open(const Api& api, const VerbsOptions& config);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Api& api() const noexcept { return api_; }
  ibv_context* context() const noexcept { return context_; }
  ibv_pd* pd() const noexcept { return pd_; }
  const std::string& name() const noexcept { return name_; }
  std::uint8_t port() const noexcept { return port_; }
  const ibv_device_attr& attr() const noexcept { return attr_; }
  const ibv_port_attr& port_attr() const noexcept { return port_attr_; }
  bool ethernet() const noexcept { return port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET; }
  const GidEntry& gid() const noexcept { return gid_; }

 private:
  Device(const Api& api, ibv_context* context, std::string name) noexcept
      : api_(api), context_(context), name_(std::move(name)) {}
  Result<void> setup(const VerbsOptions& config);
  Result<void> choose_gid(const VerbsOptions& config);

  const Api& api_;
  ibv_context* context_;
  ibv_pd* pd_ = nullptr;
  std::string name_;
  std::uint8_t port_ = 1;
  ibv_device_attr attr_{};
  ibv_port_attr port_attr_{};
  GidEntry gid_{};
};

}  // namespace rdmakit::verbs_impl
