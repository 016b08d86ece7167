// Placeholder until the verbs transport lands: opening it is a clear error, never a silent fallback.
#include "transport/transport.hpp"

namespace rdmakit::transport {

Result<std::shared_ptr<Context>> open_verbs(const Config&) {
  return fail(Errc::NotSupported, "the verbs transport is not built into this rdmakit yet");
}

}  // namespace rdmakit::transport
