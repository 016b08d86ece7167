// What this library is assembled from: every transport built into it and every layer's option table,
// named once here. Explicit arrays of calls rather than self-registering static objects, so that the
// linker keeps each one whether the library is shared or static (an unreferenced object file of a static
// library, and its static initializers with it, are dropped). CMake defines RDMAKIT_WITH_<NAME> to 0 or 1.
#include <vector>

#include "bootstrap/options.hpp"
#include "coll/comm_options.hpp"
#include "core/option_table.hpp"
#include "cuda/options.hpp"
#include "transport/transport.hpp"

#if RDMAKIT_WITH_CKPT
#include "ckpt/options.hpp"
#endif

#if !RDMAKIT_WITH_VERBS
#include "rdmakit/verbs.hpp"
#endif

namespace rdmakit {

std::span<const transport::Registration> transport::builtin() {
  static const Registration entries[] = {
    tcp_registration(),
#if RDMAKIT_WITH_SHM
    shm_registration(),
#endif
#if RDMAKIT_WITH_VERBS
    verbs_registration(),
#endif
#if RDMAKIT_WITH_FAULT
    fault_registration(),
#endif
  };
  return entries;
}

std::span<const options::Table* const> options::option_tables() {
  // The core's, each built transport's (in builtin()'s order), then the layers above.
  static const std::vector<const Table*> tables = [] {
    std::vector<const Table*> out = context_tables();
    for (const Table* layer : layers()) out.push_back(layer);
    return out;
  }();
  return tables;
}

std::span<const options::Table* const> options::layers() {
  static const Table* const tables[] = {
    &bootstrap::bootstrap_option_table(),
    &coll::detail::coll_option_table(),
    &detail::cuda::cuda_option_table(),
#if RDMAKIT_WITH_CKPT
    &ckpt::detail::ckpt_option_table(),
#endif
  };
  return tables;
}

#if !RDMAKIT_WITH_VERBS
// rdmakit/verbs.hpp is public whatever the build, so programs that call it link; without the transport it
// has nothing to report.
namespace verbs {
namespace {
constexpr const char* kNotBuilt = "the verbs transport was not built (CMake option RDMAKIT_WITH_VERBS=OFF)";
}
Result<RegistrationCacheStats> registration_cache_stats(const Context&) {
  return fail(Errc::NotSupported, kNotBuilt);
}
Result<std::vector<DeviceInfo>> list_devices() { return fail(Errc::NotSupported, kNotBuilt); }
}  // namespace verbs
#endif

}  // namespace rdmakit
