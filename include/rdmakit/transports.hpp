// The transports built into this library (CMake options RDMAKIT_WITH_<NAME>), as Context::open knows
// them. Opening a name that is not among them fails with Errc::NotSupported listing these.
#pragma once

#include <string>
#include <vector>

#include "rdmakit/export.hpp"

namespace rdmakit {

struct TransportInfo {
  std::string name{};        // what Options::transport takes, e.g. "tcp"
  std::string summary{};     // one line: what it is
  bool wraps_inner = false;  // opened as "<name>:<inner>" (fault:tcp): it wraps another transport
  // Options::device names one of several devices of the machine (verbs): a layer that stripes over
  // devices (the transfer engine's rails) opens one context per device.
  bool picks_device = false;
};

RDMAKIT_API std::vector<TransportInfo> built_transports();

}  // namespace rdmakit
