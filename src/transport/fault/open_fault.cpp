// Placeholder until the fault transport lands.
#include "transport/transport.hpp"

namespace rdmakit::transport {

Result<std::shared_ptr<Context>> open_fault(const Config&, std::shared_ptr<Context>) {
  return fail(Errc::NotSupported, "the fault transport is not built into this rdmakit yet");
}

}  // namespace rdmakit::transport
