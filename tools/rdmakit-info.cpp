// rdmakit-info: what rdmakit sees on this machine. RDMA devices, ports, GIDs and limits (verbs), the
// registration cache of a verbs context, and with --config the effective configuration.
//
//   rdmakit-info            devices and the verbs context's state
//   rdmakit-info --config   also every option: effective value, default, environment variable, doc
#include <cstdio>
#include <string>
#include <string_view>

#include "rdmakit/context.hpp"
#include "rdmakit/options.hpp"
#include "rdmakit/verbs.hpp"

namespace {

void print_port(const rdmakit::verbs::PortInfo& port) {
  std::printf("  port %u: %s, %s, active MTU %u (max %u), lid %u, max message %u bytes\n", port.number,
              port.state.c_str(), port.link_layer.c_str(), port.active_mtu, port.max_mtu, port.lid, port.max_msg_size);
  for (const auto& gid : port.gids)
    std::printf("    gid %3u  %s  %-8s %s%s\n", gid.index, gid.gid.c_str(), gid.type.c_str(), gid.ipv4.c_str(),
                static_cast<std::int32_t>(gid.index) == port.default_gid_index ? "  <- default" : "");
  if (port.gids.empty()) std::printf("    no GIDs (on RoCE: give the netdev an IP address)\n");
}

void print_device(const rdmakit::verbs::DeviceInfo& d) {
  std::printf("device %s (vendor 0x%x part %u, firmware %s)\n", d.name.c_str(), d.vendor_id, d.vendor_part_id,
              d.firmware.c_str());
  std::printf("  max_qp %u, max_qp_wr %u, max_sge %u, max_cq %u, max_cqe %u, max_mr %u, max_mr_size %llu\n", d.max_qp,
              d.max_qp_wr, d.max_sge, d.max_cq, d.max_cqe, d.max_mr, static_cast<unsigned long long>(d.max_mr_size));
  std::printf("  atomics: %s, max_qp_rd_atom %u\n", d.atomic_cap.c_str(), d.max_qp_rd_atom);
  for (const auto& port : d.ports) print_port(port);
}

void print_cache(const rdmakit::Config& config) {
  rdmakit::Options options;
  options.transport = "verbs";
  auto context = rdmakit::Context::open(options);
  if (!context) {
    std::printf("verbs context: cannot open: %s\n", context.error().describe().c_str());
    return;
  }
  auto stats = rdmakit::verbs::registration_cache_stats(**context);
  if (!stats) return;
  std::printf("registration cache (of a fresh context on device '%s'): %s; hits %llu, misses %llu, entries %llu, "
              "pinned %llu bytes, %llu registrations in %.3f ms\n",
              config.device.empty() ? "first active" : config.device.c_str(), stats->enabled ? "on" : "off",
              static_cast<unsigned long long>(stats->hits), static_cast<unsigned long long>(stats->misses),
              static_cast<unsigned long long>(stats->entries), static_cast<unsigned long long>(stats->pinned_bytes),
              static_cast<unsigned long long>(stats->registrations), stats->registration_time.count() / 1e6);
}

int print_config(const rdmakit::Config& config) {
  std::printf("effective configuration (set in code > environment > default):\n");
  for (const auto& option : rdmakit::describe_options(config))
    std::printf("  %-20s = %-16s (default %s, %s)\n      %s\n", option.name.c_str(), option.value.c_str(),
                option.default_value.c_str(), option.env.c_str(), option.doc.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool config_wanted = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--config" || arg == "-c") {
      config_wanted = true;
    } else {
      std::fprintf(stderr, "usage: rdmakit-info [--config]\n");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  auto config = rdmakit::resolve_config({});
  if (!config) {
    std::fprintf(stderr, "rdmakit-info: %s\n", config.error().describe().c_str());
    return 1;
  }
  auto devices = rdmakit::verbs::list_devices();
  if (!devices) {
    std::printf("verbs: unavailable: %s\n", devices.error().message().c_str());
  } else if (devices->empty()) {
    std::printf("verbs: rdma-core is installed but there is no RDMA device (load the NIC's driver, or for Soft-RoCE: "
                "rdma link add rxe0 type rxe netdev <interface>)\n");
  } else {
    for (const auto& device : *devices) print_device(device);
    print_cache(*config);
  }
  if (config_wanted) print_config(*config);
  return 0;
}
