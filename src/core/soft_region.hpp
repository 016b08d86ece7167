// Registration for the software transports: a MemoryRegion backed by a RegistrationTable entry.
#pragma once

#include <memory>

#include "core/registration_table.hpp"
#include "cuda/pointer.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit {

// Checks the arguments as ibv_reg_mr does and registers [data, data+size) in `table`. The region keeps
// `owner` (the context) alive. `device`: CUDA device memory (classified by the caller), registered for the
// staged path: the transport moves its bytes through host memory (core/staged_copy.hpp), never the CPU.
Result<std::shared_ptr<MemoryRegion>> register_soft(std::shared_ptr<RegistrationTable> table,
                                                    std::shared_ptr<const Context> owner, void* data,
                                                    std::size_t size, Access access,
                                                    const detail::cuda::PointerInfo* device = nullptr);

// The argument checks alone, shared with transports that register elsewhere (verbs).
Result<void> check_registration(const void* data, std::size_t size, Access access);

}  // namespace rdmakit
