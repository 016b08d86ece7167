// Which verbs devices the engine's tests use (the Soft-RoCE VM sets them; elsewhere the tests run over shm
// and tcp only). Shared by the tests and the owner process they start (xfer_peer).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace rdmakit::xfer::testing {

// The verbs devices the tests use, from RDMAKIT_TEST_XFER_VERBS_DEVICES ("rxe0" or "rxe0,rxe1"; the Soft-RoCE
// VM sets it): empty when unset, and then the tests run over shm and tcp only.
inline std::vector<std::string> verbs_devices() {
  std::vector<std::string> devices;
  const char* text = std::getenv("RDMAKIT_TEST_XFER_VERBS_DEVICES");
  std::string list = text ? text : "";
  for (std::size_t start = 0; start < list.size();) {
    auto comma = std::min(list.find(',', start), list.size());
    if (comma > start) devices.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return devices;
}
// An owner's devices: the client's in reverse order. Rail i of a client pairs with rail i of the owner, so
// with two devices on one host (the VM's rxe0 and rxe1 on a veth pair) every connection goes from one
// device to the other, over the wire, and a batch is striped over both.
inline std::vector<std::string> owner_verbs_devices() {
  auto devices = verbs_devices();
  return {devices.rbegin(), devices.rend()};
}

}  // namespace rdmakit::xfer::testing
