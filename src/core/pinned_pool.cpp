#include "core/pinned_pool.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <string>

#include "cuda/runtime.hpp"

namespace rdmakit::detail {

std::size_t staging_size_class(std::size_t size) {
  std::size_t c = std::size_t{64} << 10;
  while (c < size) c <<= 1;
  return c;
}

PinnedSlotPool::Slot::~Slot() {
  const cuda::Runtime* rt = (pinned || event) ? staging_runtime() : nullptr;
  if (rt && event) rt->event_destroy(event);
  if (rt && pinned) rt->host_unregister(data);
  if (data) ::munmap(data, size);
}

PinnedSlotPool::~PinnedSlotPool() {
  free_.clear();
  if (streams_.empty()) return;
  if (const cuda::Runtime* rt = staging_runtime())
    for (auto& [device, stream] : streams_) rt->stream_destroy(stream);
}

Result<std::unique_ptr<PinnedSlotPool::Slot>> PinnedSlotPool::acquire(std::size_t size) {
  const std::size_t bytes = size == 0 ? options_.chunk : staging_size_class(size);
  {
    std::lock_guard lock(mutex_);
    if (auto it = free_.lower_bound(bytes); it != free_.end() && it->first < 2 * bytes) {
      auto slot = std::move(it->second);
      free_.erase(it);
      free_bytes_ -= slot->size;
      return slot;
    }
  }
  return map(bytes, "device staging");
}

Result<std::unique_ptr<PinnedSlotPool::Slot>> PinnedSlotPool::map(std::size_t bytes, std::string_view who) {
  auto slot = std::make_unique<Slot>();
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED)
    return fail_errno(std::string(who) + ": mmap of a " + std::to_string(bytes) + "-byte buffer", errno);
  slot->data = static_cast<std::byte*>(memory);
  slot->size = bytes;
  if (const cuda::Runtime* rt = staging_runtime(); rt && rt->host_register)
    slot->pinned = rt->host_register(memory, bytes, cuda::kHostRegisterDefault) == cuda::kSuccess;
  return slot;
}

void PinnedSlotPool::release(std::unique_ptr<Slot> slot) {
  if (!slot) return;  // its copies were waited for (DeviceInbound::finish, stage_from_device)
  std::lock_guard lock(mutex_);
  if (free_bytes_ + slot->size > options_.cached_bytes) return;  // freed here
  free_bytes_ += slot->size;
  const std::size_t size = slot->size;
  free_.emplace(size, std::move(slot));
}

Result<cuda::Stream> PinnedSlotPool::stream(int device) {
  std::lock_guard lock(mutex_);
  if (auto it = streams_.find(device); it != streams_.end()) return it->second;
  auto rt = cuda::Runtime::get();
  if (!rt) return std::unexpected(rt.error());
  auto stream = cuda::create_library_stream(**rt, device, "device staging");
  if (stream) streams_[device] = *stream;
  return stream;
}

}  // namespace rdmakit::detail
