#include "transport/verbs/options.hpp"

namespace rdmakit::verbs_impl {
namespace {

using Table = options::OptionTable<VerbsOptions, options::NoGiven>;
using options::option;

Result<void> check(VerbsOptions& o, const options::SetOptions&) {
  if (auto mtu = o.mtu; mtu && *mtu != 256 && *mtu != 512 && *mtu != 1024 && *mtu != 2048 && *mtu != 4096)
    return std::unexpected(options::bad_option(
        "mtu",
        "must be 256, 512, 1024, 2048 or 4096 (or unset: the port's MTU), got " + std::to_string(*mtu)));
  if (o.staging_chunk < 4096)
    return std::unexpected(options::bad_option(
        "staging_chunk", "must be at least 4096 bytes, got " + std::to_string(o.staging_chunk)));
  return {};
}

const Table& table() {
  using V = VerbsOptions;
  static const Table table(
      "verbs",
      {
          option("device", "", "verbs: RDMA device to use (e.g. rxe0); empty = the first with an active port",
                 "a device name", &V::device),
          option("port", "1", "verbs: port number on the device", "an integer", &V::port),
          option("gid_index", nullptr, "verbs: GID index; unset = pick a RoCEv2 GID (IPv4-mapped first)",
                 "an integer", &V::gid_index),
          option("mtu", nullptr,
                 "verbs: path MTU in bytes (256, 512, 1024, 2048 or 4096); unset = the port's active MTU",
                 "an integer", &V::mtu),
          option("inline_size", "64", "verbs: WRITE/SEND payloads up to this many bytes are posted inline",
                 "an integer", &V::inline_size),
          option("registration_cache", "yes", "verbs: reuse the registration of the same or a covering range",
                 "yes or no", &V::registration_cache),
          option("staging_chunk", "1048576",
                 "verbs: device memory staged through host memory (no GPUDirect) is copied in chunks of this "
                 "many bytes, all in flight on the library's stream before it synchronizes",
                 "an integer", &V::staging_chunk),
      },
      check);
  return table;
}

}  // namespace

const options::Table& verbs_option_table() { return table(); }

Result<VerbsOptions> resolve_verbs_options(const Config& config) {
  return table().resolve({}, nullptr, options::Sources{&config.transport_options, false});
}

}  // namespace rdmakit::verbs_impl
