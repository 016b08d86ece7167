// The staged path's copies: bytes between device memory and host memory the transport owns, for transports
// whose CPU moves the bytes (tcp). Every copy goes through the CUDA runtime (cudaMemcpy with
// cudaMemcpyDefault: unified addressing tells the direction), so a device pointer is never dereferenced.
#pragma once

#include <cstddef>

#include "rdmakit/error.hpp"

namespace rdmakit::detail {

// Copies `size` bytes; either side may be device memory. `what` names the operation for the error.
// Synchronous: it returns when the bytes are there (the caller sends them next, or acknowledges them).
Result<void> staged_copy(void* destination, const void* source, std::size_t size, const char* what);

}  // namespace rdmakit::detail
