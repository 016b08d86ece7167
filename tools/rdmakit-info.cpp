// rdmakit-info: what rdmakit sees on this machine, like `ucx_info -d`: every transport built into the
// library with its capabilities and limits (or why it does not open here), the RDMA devices, ports, GIDs
// and limits, registration-cache statistics, and with --config the effective configuration of every layer.
//
//   rdmakit-info            transports and devices
//   rdmakit-info --config   also every option of every layer: effective value, default, variable, doc
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/context.hpp"
#include "rdmakit/options.hpp"
#include "rdmakit/transports.hpp"
#include "rdmakit/verbs.hpp"
#include "rdmakit/version.hpp"

namespace {

void print_cache(const rdmakit::Context& context) {
  auto stats = rdmakit::verbs::registration_cache_stats(context);
  if (!stats) return;  // not a verbs context
  std::printf(
      "  registration cache: %s; hits %llu, misses %llu, entries %llu, pinned %llu bytes, %llu "
      "registrations in %.3f ms\n",
      stats->enabled ? "on" : "off", static_cast<unsigned long long>(stats->hits),
      static_cast<unsigned long long>(stats->misses), static_cast<unsigned long long>(stats->entries),
      static_cast<unsigned long long>(stats->pinned_bytes),
      static_cast<unsigned long long>(stats->registrations), stats->registration_time.count() / 1e6);
}

// Opens the transport with the configuration of the environment and prints what it can do.
void print_transport(const rdmakit::TransportInfo& info) {
  if (info.wraps_inner) {
    std::printf("transport %s:<inner>: %s\n  capabilities: those of <inner>\n", info.name.c_str(),
                info.summary.c_str());
    return;
  }
  std::printf("transport %s: %s\n", info.name.c_str(), info.summary.c_str());
  auto context = rdmakit::Context::open({.transport = info.name});
  if (!context) {
    std::printf("  cannot open here: %s\n", context.error().describe().c_str());
    return;
  }
  // Every field, from the library's own listing (tests/info/check_capabilities.sh checks the names).
  for (const auto& row : rdmakit::describe_capabilities((*context)->capabilities()))
    std::printf("  %-33s %s\n", row.name.c_str(), row.text.c_str());
  print_cache(**context);
}

void print_port(const rdmakit::verbs::PortInfo& port) {
  std::printf("  port %u: %s, %s, active MTU %u (max %u), lid %u, max message %u bytes\n", port.number,
              port.state.c_str(), port.link_layer.c_str(), port.active_mtu, port.max_mtu, port.lid,
              port.max_msg_size);
  for (const auto& gid : port.gids)
    std::printf("    gid %3u  %s  %-8s %s%s\n", gid.index, gid.gid.c_str(), gid.type.c_str(),
                gid.ipv4.c_str(),
                static_cast<std::int32_t>(gid.index) == port.default_gid_index ? "  <- default" : "");
  if (port.gids.empty()) std::printf("    no GIDs (on RoCE: give the netdev an IP address)\n");
}

void print_device(const rdmakit::verbs::DeviceInfo& d) {
  std::printf("device %s (vendor 0x%x part %u, firmware %s)\n", d.name.c_str(), d.vendor_id, d.vendor_part_id,
              d.firmware.c_str());
  std::printf("  max_qp %u, max_qp_wr %u, max_sge %u, max_cq %u, max_cqe %u, max_mr %u, max_mr_size %llu\n",
              d.max_qp, d.max_qp_wr, d.max_sge, d.max_cq, d.max_cqe, d.max_mr,
              static_cast<unsigned long long>(d.max_mr_size));
  std::printf("  atomics: %s, max_qp_rd_atom %u\n", d.atomic_cap.c_str(), d.max_qp_rd_atom);
  for (const auto& port : d.ports) print_port(port);
}

int print_config() {
  auto options = rdmakit::describe_options();
  if (!options) {
    std::fprintf(stderr, "rdmakit-info: %s\n", options.error().describe().c_str());
    return 1;
  }
  std::printf("\neffective configuration (set in code > environment > default):\n");
  std::string layer;
  for (const auto& option : *options) {
    if (option.layer != layer) std::printf("[%s]\n", (layer = option.layer).c_str());
    std::printf("  %-30s = %-16s (default %s, %s)\n      %s\n", option.name.c_str(), option.value.c_str(),
                option.default_value.empty() ? "unset" : option.default_value.c_str(), option.env.c_str(),
                option.doc.c_str());
  }
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
  std::string built;
  for (const auto& info : rdmakit::built_transports())
    built += (built.empty() ? "" : ", ") + info.name + (info.wraps_inner ? ":<inner>" : "");
  std::printf("rdmakit %d.%d.%d: transports built: %s\n\n", rdmakit::kVersionMajor, rdmakit::kVersionMinor,
              rdmakit::kVersionPatch, built.c_str());
  for (const auto& info : rdmakit::built_transports()) print_transport(info);
  std::printf("\n");
  auto devices = rdmakit::verbs::list_devices();
  if (!devices) {
    std::printf("RDMA devices: none listed: %s\n", devices.error().message().c_str());
  } else if (devices->empty()) {
    std::printf(
        "RDMA devices: none (rdma-core is installed; load the NIC's driver, or for Soft-RoCE: "
        "rdma link add rxe0 type rxe netdev <interface>)\n");
  } else {
    for (const auto& device : *devices) print_device(device);
  }
  return config_wanted ? print_config() : 0;
}
