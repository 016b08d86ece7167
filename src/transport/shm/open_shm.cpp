// Context::open("shm") lands here.
#include "transport/shm/context.hpp"
#include "transport/shm/options.hpp"
#include "transport/transport.hpp"

namespace rdmakit::transport {

namespace {
Result<std::shared_ptr<Context>> open_shm(const Config& config) {
  auto context = shm::ShmContext::create(config);
  if (!context) return std::unexpected(context.error());
  return std::shared_ptr<Context>(std::move(*context));
}
}  // namespace

Registration shm_registration() {
  return {.name = "shm",
          .summary =
              "processes of one host (same uid unless shm_allowed_uids): shared mappings, the initiator "
              "moves the bytes",
          .options = &shm::shm_option_table(),
          .open = open_shm};
}

}  // namespace rdmakit::transport
