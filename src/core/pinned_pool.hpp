// Pinned host memory for the staged path of a transport whose CPU moves the bytes (tcp): buffers that
// cudaMemcpyAsync can DMA to and from (cudaHostRegister'ed where the runtime allows; the copy from pageable
// memory goes through the driver's own staging, synchronously, at a fraction of the rate), and one
// non-blocking stream per device. Shared by a context's connections; buffers are kept for reuse up to
// `cached_bytes`, since registering them is what costs, not the memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "core/staged_copy.hpp"
#include "cuda/api.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::detail {

// The power of two from 64 KiB up that holds `size`: buffers are pooled by these classes.
std::size_t staging_size_class(std::size_t size);

class PinnedSlotPool {
 public:
  struct Options {
    std::size_t chunk = std::size_t{4} << 20;  // the receive ring's slot (DeviceInbound)
    std::uint32_t depth = 2;                   // slots one payload keeps in flight
    std::size_t cached_bytes = std::size_t{64} << 20;
  };
  // Host memory and the event behind its last copy (DeviceInbound).
  struct Slot {
    std::byte* data = nullptr;
    std::size_t size = 0;
    bool pinned = false;
    cuda::Event event = nullptr;  // recorded on the stream of `event_device`
    int event_device = -1;
    bool copy_pending = false;  // `event` was recorded behind a copy from this slot that may still run
    ~Slot();
  };
  // `bytes` of fresh host memory, pinned where the runtime allows. `who` names the caller in the error.
  static Result<std::unique_ptr<Slot>> map(std::size_t bytes, std::string_view who);

  explicit PinnedSlotPool(Options options) : options_(options) {}
  ~PinnedSlotPool();
  PinnedSlotPool(const PinnedSlotPool&) = delete;
  PinnedSlotPool& operator=(const PinnedSlotPool&) = delete;

  const Options& options() const noexcept { return options_; }
  // At least `size` bytes (a power of two from 64 KiB), no copy pending; one chunk by default. Fails only
  // when host memory cannot be mapped.
  Result<std::unique_ptr<Slot>> acquire(std::size_t size = 0);
  void release(std::unique_ptr<Slot> slot);
  // The library's non-blocking stream on `device` (made on first use).
  Result<cuda::Stream> stream(int device);

 private:
  Options options_;
  std::mutex mutex_;
  std::multimap<std::size_t, std::unique_ptr<Slot>> free_;  // by size; guarded by mutex_
  std::size_t free_bytes_ = 0;                              // guarded by mutex_
  std::map<int, cuda::Stream> streams_;                     // guarded by mutex_
};

// A pool's buffer held by a frame until it is sent; back in the pool when dropped.
class PinnedBytes {
 public:
  PinnedBytes() = default;
  PinnedBytes(std::shared_ptr<PinnedSlotPool> pool, std::unique_ptr<PinnedSlotPool::Slot> slot,
              std::size_t size)
      : pool_(std::move(pool)), slot_(std::move(slot)), size_(size) {}
  PinnedBytes(PinnedBytes&&) noexcept = default;
  PinnedBytes& operator=(PinnedBytes&& other) noexcept {
    if (this != &other) {
      reset();
      pool_ = std::move(other.pool_);
      slot_ = std::move(other.slot_);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~PinnedBytes() { reset(); }
  bool empty() const noexcept { return !slot_; }
  std::byte* data() const noexcept { return slot_ ? slot_->data : nullptr; }
  std::size_t size() const noexcept { return size_; }
  void reset() {
    if (slot_) pool_->release(std::move(slot_));
    size_ = 0;
  }

 private:
  std::shared_ptr<PinnedSlotPool> pool_;
  std::unique_ptr<PinnedSlotPool::Slot> slot_;
  std::size_t size_ = 0;
};

}  // namespace rdmakit::detail
