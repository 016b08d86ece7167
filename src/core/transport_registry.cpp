#include "core/transport_registry.hpp"

#include <string>

#include "rdmakit/transports.hpp"

namespace rdmakit {
namespace transport {
namespace {

std::string display_name(const Registration& entry) {
  return std::string(entry.name) + (entry.wraps_inner ? ":<inner>" : "");
}

std::string built_list() {
  std::string list;
  for (const Registration& entry : builtin()) list += (list.empty() ? "" : ", ") + display_name(entry);
  return list;
}

}  // namespace

Result<std::shared_ptr<Context>> open(const Config& config) {
  const std::string& name = config.transport;
  std::string_view base = std::string_view(name).substr(0, name.find(':'));
  bool has_inner = base.size() < name.size();
  for (const Registration& entry : builtin()) {
    if (entry.name != base) continue;
    if (entry.wraps_inner && (!has_inner || base.size() + 1 == name.size()))
      return fail(Errc::InvalidArgument, "option transport: '" + name +
                                             "' names no inner transport (expected " + display_name(entry) +
                                             ", e.g. " + std::string(base) + ":tcp)");
    if (!entry.wraps_inner && has_inner)
      return fail(Errc::InvalidArgument,
                  "option transport: '" + name + "': the " + std::string(base) + " transport wraps no other");
    return entry.open(config);
  }
  return fail(Errc::NotSupported, "option transport: '" + name +
                                      "' is not a transport of this build (built: " + built_list() + ")");
}

}  // namespace transport

std::vector<TransportInfo> built_transports() {
  std::vector<TransportInfo> out;
  for (const transport::Registration& entry : transport::builtin())
    out.push_back(TransportInfo{std::string(entry.name), std::string(entry.summary), entry.wraps_inner,
                                entry.picks_device});
  return out;
}

}  // namespace rdmakit
