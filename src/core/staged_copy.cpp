#include "core/staged_copy.hpp"

#include <string>

#include "cuda/runtime.hpp"

namespace rdmakit::detail {

Result<void> staged_copy(void* destination, const void* source, std::size_t size, const char* what) {
  if (size == 0) return {};
  // The runtime was loaded when the device region was registered: this is a lookup.
  auto rt = cuda::Runtime::get();
  if (!rt) return fail(rt.error().code(), std::string(what) + ": " + rt.error().message());
  if (auto e = (*rt)->memcpy(destination, source, size, cuda::kDefault); e != cuda::kSuccess)
    return fail(Errc::TransportFailure, std::string(what) + ": " + (*rt)->describe("cudaMemcpy", e));
  return {};
}

}  // namespace rdmakit::detail
