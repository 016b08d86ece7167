// How the core opens transports. Each transport folder defines its open function; Context::open
// dispatches on Config::transport. Adding a transport = one folder, one CMake target, one line here and
// one in src/core/context.cpp.
#pragma once

#include <memory>

#include "rdmakit/context.hpp"

namespace rdmakit::transport {

Result<std::shared_ptr<Context>> open_tcp(const Config& config);
Result<std::shared_ptr<Context>> open_shm(const Config& config);
Result<std::shared_ptr<Context>> open_verbs(const Config& config);
// Wraps `inner` (a context opened with the name after "fault:") in the fault-injecting transport.
Result<std::shared_ptr<Context>> open_fault(const Config& config, std::shared_ptr<Context> inner);

}  // namespace rdmakit::transport
