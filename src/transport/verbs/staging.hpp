// Device memory over verbs without GPUDirect (gpudirect.hpp): the NIC cannot reach it, so an operation whose
// local side is device memory goes through a registered, pinned host bounce buffer owned by the context.
// WRITE and SEND: the device bytes are copied into the buffer before the post; READ, atomics and RECV: the
// work request lands in the buffer and the completion queue's poller copies it into device memory before it
// delivers the user's completion (VerbsCompletionQueue::settle_staged). The device copies are chunked
// (option staging_chunk) and all in flight on the library's own stream before one synchronize. The work
// request is the user's own (same id, same signaling): nothing internal reaches the user's queue.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <vector>

#include "core/pinned_pool.hpp"
#include "cuda/api.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/memory.hpp"
#include "transport/verbs/device.hpp"

namespace rdmakit::verbs_impl {

namespace cuda = detail::cuda;

// Pinned (cudaHostRegister'ed where the runtime allows) and ibv_reg_mr'ed host memory.
class StagingBuffer {
 public:
  static Result<std::unique_ptr<StagingBuffer>> create(std::shared_ptr<Device> device, std::size_t size);
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  std::byte* data() const noexcept { return host_->data; }
  std::size_t size() const noexcept { return host_->size; }
  std::uint32_t lkey() const noexcept { return mr_->lkey; }

 private:
  StagingBuffer() = default;
  std::shared_ptr<Device> device_;
  std::unique_ptr<detail::PinnedSlotPool::Slot> host_;  // mapped, pinned where the runtime allows
  ibv_mr* mr_ = nullptr;
};

class Staging : public std::enable_shared_from_this<Staging> {
 public:
  Staging(std::shared_ptr<Device> device, std::size_t chunk) : device_(std::move(device)), chunk_(chunk) {}
  ~Staging();

  // The device ranges registered with the staged path (MemoryPath::Staged), by address.
  void add_range(std::uint64_t addr, std::size_t size, int device, Access access);
  void remove_range(std::uint64_t addr, std::size_t size);
  bool active() const noexcept { return ranges_count_.load(std::memory_order_acquire) > 0; }
  // Whether any segment lies in a staged range (device memory the NIC cannot reach).
  bool involves(std::span<const Segment> segments) const;
  // Whether every staged segment lies in a range registered with LocalWrite: the NIC would refuse to write
  // into memory without it (LocalProtection), so the staged copy must not write there either.
  bool writable(std::span<const Segment> segments) const;

  // A buffer of at least `size` bytes, back in the pool when the last holder drops it.
  Result<std::shared_ptr<StagingBuffer>> acquire(std::size_t size);
  // Device and host segments -> `to` (contiguous): each device segment in chunks on the library's stream,
  // then one synchronize.
  Result<void> gather(std::span<const Segment> from, std::byte* to);
  // The first `bytes` of `from` -> the segments, in order (a RECV fills a prefix of its list).
  Result<void> scatter(const std::byte* from, std::size_t bytes, std::span<const Segment> to);

 private:
  struct Range {
    std::size_t size;
    int device;
    Access access;
  };
  const Range* range_of(const Segment& segment) const;
  std::optional<int> device_of(const Segment& segment) const;
  Result<cuda::Stream> stream_for(int device);  // copy_mutex_ held
  void give_back(StagingBuffer* buffer);
  Result<void> copy_segments(std::span<const Segment> segments, std::size_t bytes, std::byte* host,
                             bool to_host);

  std::shared_ptr<Device> device_;
  std::size_t chunk_;
  mutable std::shared_mutex ranges_mutex_;
  std::multimap<std::uint64_t, Range> ranges_;  // a region and one inside it may share a start
  std::atomic<std::size_t> ranges_count_{0};
  std::mutex copy_mutex_;
  std::map<int, cuda::Stream> streams_;  // one per device, made on first use
  std::mutex pool_mutex_;
  std::multimap<std::size_t, std::unique_ptr<StagingBuffer>> free_;  // by size
  std::size_t free_bytes_ = 0;
};

}  // namespace rdmakit::verbs_impl
