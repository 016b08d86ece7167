// CommOptions with every empty field filled from the environment or the default.
#pragma once

#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::coll::detail {

Result<CommOptions> resolve_options(const CommOptions& given);

// The local address of the interface that routes to `host` (no packet is sent); empty when unknown.
std::string route_address(const std::string& host, std::uint16_t port);

}  // namespace rdmakit::coll::detail
