// Context::open("shm") lands here.
#include "transport/shm/context.hpp"
#include "transport/transport.hpp"

namespace rdmakit::transport {

Result<std::shared_ptr<Context>> open_shm(const Config& config) {
  auto context = shm::ShmContext::create(config);
  if (!context) return std::unexpected(context.error());
  return std::shared_ptr<Context>(std::move(*context));
}

}  // namespace rdmakit::transport
