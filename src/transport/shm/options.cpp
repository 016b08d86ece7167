#include "transport/shm/options.hpp"

namespace rdmakit::shm {
namespace {

using Table = options::OptionTable<ShmOptions, options::NoGiven>;

Result<void> check(ShmOptions& o, const options::SetOptions&) {
  const std::string& uids = o.allowed_uids;
  if (uids.find_first_not_of("0123456789,") != std::string::npos || uids.find(",,") != std::string::npos ||
      uids.starts_with(',') || uids.ends_with(','))
    return std::unexpected(
        options::bad_option("shm_allowed_uids", "must be uids separated by commas, got '" + uids + "'"));
  return {};
}

const Table& table() {
  static const Table table(
      "shm",
      {options::option(
          "shm_allowed_uids", "",
          "shm: uids besides our own that may connect to us and that we connect to, comma-separated; "
          "empty = our own uid only (anyone allowed can read and write our remote-writable memory)",
          "uids separated by commas", &ShmOptions::allowed_uids)},
      check);
  return table;
}

}  // namespace

const options::Table& shm_option_table() { return table(); }

Result<ShmOptions> resolve_shm_options(const Config& config) {
  return table().resolve({}, nullptr, options::Sources{&config.transport_options, false});
}

}  // namespace rdmakit::shm
