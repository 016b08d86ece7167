// The staged path's copies: bytes between device memory and host memory the transport owns, for transports
// whose CPU moves the bytes (tcp). Every copy goes through the CUDA runtime (cudaMemcpy with
// cudaMemcpyDefault: unified addressing tells the direction), so a device pointer is never dereferenced.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rdmakit/error.hpp"

namespace rdmakit::detail {

namespace cuda {
class Runtime;
}
// The CUDA runtime, or null when none loads. Looked up once and kept: the staged path runs only after a
// device region was registered, which loaded it, and it is never unloaded (Runtime::get() takes a mutex and
// asks for the device count, which a per-chunk call should not pay).
const cuda::Runtime* staging_runtime();

// The device `pointer` lies on, or -1 for memory the CPU may touch itself (host memory, or what the runtime
// does not know).
int staged_device_of(const cuda::Runtime& rt, const void* pointer);

// Copies `size` bytes; either side may be device memory. `what` names the operation for the error.
// Synchronous: it returns when the bytes are there (the caller sends them next, or acknowledges them).
Result<void> staged_copy(void* destination, const void* source, std::size_t size, const char* what);

// An atomic on an 8-byte word of device memory, done by the CPU through the runtime: read, compute, write
// back. Atomic with respect to every other rdmakit atomic on device memory in this process, whatever the
// transport (one process-wide lock, as verbs without GPUDirect atomics would be), not with respect to
// kernels running on the GPU. `compare_swap`: the word becomes `swap` when it equals `operand`; otherwise
// `operand` is added. Returns the old value.
Result<std::uint64_t> device_word_atomic(void* word, bool compare_swap, std::uint64_t operand,
                                         std::uint64_t swap, const char* what);

}  // namespace rdmakit::detail
