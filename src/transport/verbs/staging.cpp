#include "transport/verbs/staging.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cuda/runtime.hpp"

namespace rdmakit::verbs_impl {
namespace {

// Buffers kept for reuse beyond this are freed: registration is what costs, not the memory.
constexpr std::size_t kPoolBytes = std::size_t{64} << 20;

}  // namespace

Result<std::unique_ptr<StagingBuffer>> StagingBuffer::create(std::shared_ptr<Device> device,
                                                             std::size_t size) {
  std::unique_ptr<StagingBuffer> b(new StagingBuffer());
  b->device_ = std::move(device);
  // Pinned through the runtime, so cudaMemcpyAsync is a DMA, not a copy through the driver's own staging.
  auto host = detail::PinnedSlotPool::map(size, "verbs staging");
  if (!host) return std::unexpected(host.error());
  b->host_ = std::move(*host);
  b->mr_ = b->device_->api().reg_mr(b->device_->pd(), b->host_->data, size, IBV_ACCESS_LOCAL_WRITE);
  if (!b->mr_)
    return fail_errno("verbs staging: ibv_reg_mr of a " + std::to_string(size) + "-byte bounce buffer",
                      errno);
  return b;
}

StagingBuffer::~StagingBuffer() {
  if (mr_) device_->api().dereg_mr(mr_);  // before host_ unpins and unmaps the memory
}

Staging::~Staging() {
  if (streams_.empty()) return;
  if (auto rt = cuda::Runtime::get(); rt)
    for (auto& [device, stream] : streams_) (*rt)->stream_destroy(stream);
}

void Staging::add_range(std::uint64_t addr, std::size_t size, int device, Access access) {
  std::unique_lock lock(ranges_mutex_);
  ranges_.emplace(addr, Range{size, device, access});
  ranges_count_.store(ranges_.size(), std::memory_order_release);
}

void Staging::remove_range(std::uint64_t addr, std::size_t size) {
  std::unique_lock lock(ranges_mutex_);
  auto [first, last] = ranges_.equal_range(addr);
  for (auto it = first; it != last; ++it)
    if (it->second.size == size) {
      ranges_.erase(it);
      break;
    }
  ranges_count_.store(ranges_.size(), std::memory_order_release);
}

const Staging::Range* Staging::range_of(const Segment& segment) const {
  // Ranges may overlap (a region and an interior one of the same allocation): one holding the segment,
  // preferably with LocalWrite.
  const Range* found = nullptr;
  for (auto it = ranges_.upper_bound(segment.addr); it != ranges_.begin();) {
    --it;
    if (segment.addr - it->first + segment.length > it->second.size) continue;
    found = &it->second;
    if (has(found->access, Access::LocalWrite)) break;
  }
  return found;
}

std::optional<int> Staging::device_of(const Segment& segment) const {
  const Range* range = range_of(segment);
  return range ? std::optional<int>(range->device) : std::nullopt;
}

bool Staging::writable(std::span<const Segment> segments) const {
  std::shared_lock lock(ranges_mutex_);
  for (const Segment& s : segments)
    if (const Range* range = range_of(s); range && !has(range->access, Access::LocalWrite)) return false;
  return true;
}

bool Staging::involves(std::span<const Segment> segments) const {
  std::shared_lock lock(ranges_mutex_);
  for (const Segment& s : segments)
    if (device_of(s)) return true;
  return false;
}

Result<std::shared_ptr<StagingBuffer>> Staging::acquire(std::size_t size) {
  const std::size_t want = detail::staging_size_class(size == 0 ? 1 : size);
  std::unique_ptr<StagingBuffer> buffer;
  {
    std::lock_guard lock(pool_mutex_);
    if (auto it = free_.lower_bound(want); it != free_.end() && it->first <= 2 * want) {
      buffer = std::move(it->second);
      free_bytes_ -= it->first;
      free_.erase(it);
    }
  }
  if (!buffer) {
    auto made = StagingBuffer::create(device_, want);
    if (!made) return std::unexpected(made.error());
    buffer = std::move(*made);
  }
  std::weak_ptr<Staging> pool = weak_from_this();
  return std::shared_ptr<StagingBuffer>(buffer.release(), [pool](StagingBuffer* b) {
    if (auto p = pool.lock())
      p->give_back(b);
    else
      delete b;
  });
}

void Staging::give_back(StagingBuffer* buffer) {
  std::unique_ptr<StagingBuffer> owned(buffer);
  std::lock_guard lock(pool_mutex_);
  if (free_bytes_ + owned->size() > kPoolBytes) return;  // freed here
  free_bytes_ += owned->size();
  free_.emplace(owned->size(), std::move(owned));
}

Result<cuda::Stream> Staging::stream_for(int device) {
  if (auto it = streams_.find(device); it != streams_.end()) return it->second;
  auto rt = cuda::Runtime::get();
  if (!rt) return std::unexpected(rt.error());
  auto stream = cuda::create_library_stream(**rt, device, "verbs staging");
  if (stream) streams_[device] = *stream;
  return stream;
}

namespace {

// One direction of a staged copy: host side contiguous, the other side a segment list.
template <typename Copy>
Result<void> each_segment(std::span<const Segment> segments, std::size_t bytes, Copy&& copy) {
  std::size_t offset = 0;
  for (const Segment& s : segments) {
    if (offset >= bytes) break;
    const std::size_t n = std::min<std::size_t>(s.length, bytes - offset);
    if (auto ok = copy(s, offset, n); !ok) return ok;
    offset += n;
  }
  return {};
}

}  // namespace

Result<void> Staging::gather(std::span<const Segment> from, std::byte* to) {
  std::size_t total = 0;
  for (const Segment& s : from) total += s.length;
  return copy_segments(from, total, to, true);
}

Result<void> Staging::scatter(const std::byte* from, std::size_t bytes, std::span<const Segment> to) {
  return copy_segments(to, bytes, const_cast<std::byte*>(from), false);
}

Result<void> Staging::copy_segments(std::span<const Segment> segments, std::size_t bytes, std::byte* host,
                                    bool to_host) {
  std::lock_guard copy_lock(copy_mutex_);
  auto rt = cuda::Runtime::get();
  std::vector<cuda::Stream> used;
  Result<void> ok = each_segment(segments, bytes, [&](const Segment& s, std::size_t offset, std::size_t n) {
    std::optional<int> device;
    {
      std::shared_lock lock(ranges_mutex_);
      device = device_of(s);
    }
    auto* other = reinterpret_cast<std::byte*>(s.addr);
    if (!device) {  // host memory beside device memory in one list
      if (to_host)
        std::memcpy(host + offset, other, n);
      else
        std::memcpy(other, host + offset, n);
      return Result<void>{};
    }
    if (!rt) return Result<void>(std::unexpected(rt.error()));
    auto stream = stream_for(*device);
    if (!stream) return Result<void>(std::unexpected(stream.error()));
    if (std::find(used.begin(), used.end(), *stream) == used.end()) used.push_back(*stream);
    // Every chunk is queued before the one synchronize: the copy engine runs them back to back.
    for (std::size_t done = 0; done < n; done += chunk_) {
      const std::size_t piece = std::min(chunk_, n - done);
      const cuda::Error e =
          to_host
              ? (*rt)->memcpy_async(host + offset + done, other + done, piece, cuda::kDeviceToHost, *stream)
              : (*rt)->memcpy_async(other + done, host + offset + done, piece, cuda::kHostToDevice, *stream);
      if (e != cuda::kSuccess)
        return Result<void>(
            fail(Errc::SystemError, "verbs staging: " + (*rt)->describe("cudaMemcpyAsync", e)));
    }
    return Result<void>{};
  });
  // Synchronized even after a failure: a queued copy must not land in a buffer that is given back.
  for (cuda::Stream stream : used)
    if (auto e = (*rt)->stream_synchronize(stream); e != cuda::kSuccess && ok)
      ok = fail(Errc::SystemError, "verbs staging: " + (*rt)->describe("cudaStreamSynchronize", e));
  return ok;
}

}  // namespace rdmakit::verbs_impl
