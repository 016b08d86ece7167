// The staged path out of device memory for a transport whose CPU sends the bytes (tcp): a payload whose
// source is device memory (a WRITE or SEND from it, a READ of it) is copied into one pinned buffer of the
// pool before its frame is queued. The copies are cudaMemcpyAsync in chunks of the pool's chunk, all in
// flight on the library's stream before one synchronize (the copy engine runs them back to back); the
// frame then leaves from the buffer and gives it back once sent. Not yet overlapped with the socket: the
// payload is copied whole before its first byte is sent (the receiving side is: device_inbound.hpp).
#pragma once

#include <sys/uio.h>

#include <memory>
#include <span>

#include "core/pinned_pool.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::detail {

// `sources` (device memory, or host memory beside it, in order) -> one buffer of their total size.
// `what` names the operation in errors. The copies have all run when this returns, failed or not.
Result<PinnedBytes> stage_from_device(const std::shared_ptr<PinnedSlotPool>& pool,
                                      std::span<const iovec> sources, const char* what);

}  // namespace rdmakit::detail
