// How the shm transport and the shared-memory collectives move bytes. Small and cache-sized copies use memcpy
// (cached stores: the peer often reads the data soon, and it may still be in cache). An operation larger
// than the cache goes with non-temporal (streaming) stores: cached stores would first read every
// destination line from memory (read-for-ownership) only to evict it again, a third more memory traffic.
// glibc's memcpy makes the same choice for one large call, but the transport copies a large operation in
// chunks (liveness checks, fairness), each below glibc's threshold: with cached stores a 256 MiB WRITE ran
// at 6.4 GB/s, streaming at 8.1, one memcpy of 256 MiB at 9.4 (bench/RESULTS.md, shm bandwidth).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdmakit::detail {

// Copies `n` bytes; `streaming` uses non-temporal stores where the CPU has them (x86-64), and then
// ends with a store fence, so the bytes are visible to other cores before anything the caller stores
// next (a completion, the release of a pin). Any alignment; the ranges must not overlap.
void copy_bytes(void* dst, const void* src, std::size_t n, bool streaming) noexcept;

// Whether an operation of `total` bytes should be copied with streaming stores: at least the threshold
// glibc's memcpy uses for one call (3/4 of a thread's share of the last-level cache and its L2), so the
// transport never copies differently from what one memcpy of the whole operation would do.
bool streams(std::uint64_t total) noexcept;
std::uint64_t streaming_threshold() noexcept;

namespace testing {
// Lowers (or restores, with 0) the threshold, so tests reach the streaming path with small buffers.
void set_streaming_threshold(std::uint64_t bytes) noexcept;
}  // namespace testing

}  // namespace rdmakit::detail
