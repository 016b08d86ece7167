// Each transport folder's registration function: its name, summary and open function for the core's
// registry (src/core/transport_registry.hpp). src/library/builtin.cpp lists the built ones.
#pragma once

#include "core/transport_registry.hpp"

namespace rdmakit::transport {

Registration tcp_registration();
Registration shm_registration();
Registration verbs_registration();
Registration fault_registration();  // "fault:<inner>": wraps a context of any other transport

}  // namespace rdmakit::transport
