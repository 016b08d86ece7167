#include "core/device_outbound.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/runtime.hpp"

namespace rdmakit::detail {

Result<PinnedBytes> stage_from_device(const std::shared_ptr<PinnedSlotPool>& pool,
                                      std::span<const iovec> sources, const char* what) {
  std::size_t total = 0;
  for (const iovec& source : sources) total += source.iov_len;
  if (total == 0) return PinnedBytes{};
  const cuda::Runtime* rt = staging_runtime();
  if (!rt) return fail(Errc::Unavailable, std::string(what) + ": the CUDA runtime is not loaded");
  auto slot = pool->acquire(total);
  if (!slot) return std::unexpected(slot.error());
  std::byte* to = (*slot)->data;
  std::vector<cuda::Stream> used;
  Result<void> queued;
  for (const iovec& source : sources) {
    if (source.iov_len == 0) continue;
    const int device = staged_device_of(*rt, source.iov_base);
    const auto* from = static_cast<const std::byte*>(source.iov_base);
    if (device < 0) {  // host memory beside device memory in one list
      std::memcpy(to, from, source.iov_len);
      to += source.iov_len;
      continue;
    }
    auto stream = pool->stream(device);
    if (!stream) {
      queued = std::unexpected(stream.error());
      break;
    }
    if (std::find(used.begin(), used.end(), *stream) == used.end()) used.push_back(*stream);
    queued = cuda::on_device(*rt, device, [&]() -> Result<void> {
      const std::size_t chunk = pool->options().chunk;
      for (std::size_t done = 0; done < source.iov_len; done += chunk) {
        const std::size_t piece = std::min(chunk, source.iov_len - done);
        if (auto e = rt->memcpy_async(to + done, from + done, piece, cuda::kDefault, *stream);
            e != cuda::kSuccess)
          return fail(Errc::TransportFailure, std::string(what) + ": " + rt->describe("cudaMemcpyAsync", e));
      }
      return {};
    });
    if (!queued) break;
    to += source.iov_len;
  }
  // Synchronized even after a failure: a queued copy must not land in a buffer that goes back to the pool.
  for (cuda::Stream stream : used)
    if (auto e = rt->stream_synchronize(stream); e != cuda::kSuccess && queued)
      queued =
          fail(Errc::TransportFailure, std::string(what) + ": " + rt->describe("cudaStreamSynchronize", e));
  if (!queued) {
    pool->release(std::move(*slot));
    return std::unexpected(queued.error());
  }
  return PinnedBytes(pool, std::move(*slot), total);
}

}  // namespace rdmakit::detail
