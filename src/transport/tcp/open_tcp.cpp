#include "transport/transport.hpp"

namespace rdmakit::transport {

Result<std::shared_ptr<Context>> open_tcp(const Config&) {
  return fail(Errc::NotSupported, "tcp: work in progress");
}

}  // namespace rdmakit::transport
