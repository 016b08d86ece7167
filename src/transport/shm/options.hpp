// The shm transport's own options: declared in its table (options.cpp), set by name (Options::set) or
// RDMAKIT_<NAME>, carried in Config::transport_options and resolved here when a context opens.
#pragma once

#include <string>

#include "core/option_table.hpp"

namespace rdmakit::shm {

struct ShmOptions {
  std::string allowed_uids{};  // uids besides ours that may connect, "1000,1001" (parse_uid_list)
};

const options::Table& shm_option_table();
// The options `config` carries for shm, over the table's defaults.
Result<ShmOptions> resolve_shm_options(const Config& config);

}  // namespace rdmakit::shm
