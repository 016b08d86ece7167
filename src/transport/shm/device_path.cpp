#include "transport/shm/device_path.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/log.hpp"
#include "core/staged_copy.hpp"
#include "cuda/pointer.hpp"
#include "cuda/runtime.hpp"
#include "transport/shm/peer.hpp"
#include "transport/shm/registry.hpp"

namespace rdmakit::shm {
namespace {

// Cross-memory attach cannot reach device memory: such pieces bounce through host memory in chunks this big.
constexpr std::uint64_t kBounce = 1 << 20;

bool same_handle(const DeviceRef& a, const DeviceRef& b) {
  return a.base == b.base && a.size == b.size && std::memcmp(a.handle, b.handle, sizeof(a.handle)) == 0;
}

// One copy through the runtime (cudaMemcpyDefault: the runtime tells the direction from the pointers).
Status runtime_copy(void* destination, const void* source, std::uint64_t length) {
  if (auto copied = detail::staged_copy(destination, source, length, "shm: cuda-ipc copy"); !copied) {
    log::error("shm", copied.error().message());
    return Status::RemoteOperation;
  }
  return Status::Success;
}

// Device memory here <-> host memory in the peer that only cross-memory attach reaches.
Status bounce(const PeerView& peer, std::byte* local, std::uint64_t remote, std::uint64_t length,
              bool write) {
  thread_local std::vector<std::byte> buffer;
  buffer.resize(std::min(length, kBounce));
  for (std::uint64_t done = 0; done < length;) {
    std::uint64_t n = std::min<std::uint64_t>(length - done, buffer.size());
    if (write) {
      if (Status st = runtime_copy(buffer.data(), local + done, n); st != Status::Success) return st;
      if (Status st = cross_memory_range(peer, buffer.data(), remote + done, n, true); st != Status::Success)
        return st;
    } else {
      if (Status st = cross_memory_range(peer, buffer.data(), remote + done, n, false); st != Status::Success)
        return st;
      if (Status st = runtime_copy(local + done, buffer.data(), n); st != Status::Success) return st;
    }
    done += n;
  }
  return Status::Success;
}

// One stretch where a single local piece meets a single remote piece.
Status move_one(const PeerView& peer, const Piece& local, const Piece& remote, std::uint64_t local_off,
                std::uint64_t remote_off, std::uint64_t n, bool write) {
  auto* mine = reinterpret_cast<std::byte*>(local.addr + local_off);
  if (remote.device) {
    auto* theirs = reinterpret_cast<std::byte*>(remote.addr + remote_off);
    return write ? runtime_copy(theirs, mine, n) : runtime_copy(mine, theirs, n);
  }
  std::uint64_t at = remote.addr + remote_off;
  if (std::byte* mapped = peer.translate(at, n, write)) {
    if (local.device) return write ? runtime_copy(mapped, mine, n) : runtime_copy(mine, mapped, n);
    if (write)
      std::memcpy(mapped, mine, n);
    else
      std::memcpy(mine, mapped, n);
    return Status::Success;
  }
  if (local.device) return bounce(peer, mine, at, n, write);
  return cross_memory_range(peer, mine, at, n, write);
}

}  // namespace

IpcMapping::~IpcMapping() {
  if (!here) return;
  if (auto rt = detail::cuda::Runtime::get(); rt) {
    if (auto e = (*rt)->ipc_close_mem_handle(here); e != detail::cuda::kSuccess)
      log::warn("shm", (*rt)->describe("cudaIpcCloseMemHandle", e));
  }
}

std::shared_ptr<IpcMapping> IpcCache::open(const PeerView& peer, const DeviceRef& ref, std::uint32_t slot,
                                           std::uint32_t key, Status* status) {
  std::lock_guard lock(mutex_);
  for (auto& entry : entries_)
    if (same_handle(entry->ref, ref)) {
      if (key != 0) {  // a registration uses it: watched from now on
        entry->slot = slot;
        entry->key = key;
      }
      return entry;
    }
  sweep_locked(peer);
  auto rt = detail::cuda::Runtime::get();
  if (!rt) {
    log::error("shm", rt.error().message());
    *status = Status::RemoteOperation;
    return nullptr;
  }
  void* opened = nullptr;
  detail::cuda::IpcMemHandle handle;
  std::memcpy(&handle, ref.handle, sizeof(handle));
  auto done = detail::cuda::on_device(**rt, ref.device, [&]() -> Result<void> {
    if (auto e = (*rt)->ipc_open_mem_handle(&opened, handle, detail::cuda::kIpcMemLazyEnablePeerAccess);
        e != detail::cuda::kSuccess)
      return fail(Errc::TransportFailure, (*rt)->describe("cudaIpcOpenMemHandle", e));
    return {};
  });
  if (!done) {
    log::error("shm", "cuda-ipc: opening device memory of peer " + peer.name + ": " + done.error().message());
    *status = Status::RemoteAccess;
    return nullptr;
  }
  auto entry = std::make_shared<IpcMapping>();
  entry->here = static_cast<std::byte*>(opened);
  entry->ref = ref;
  entry->slot = slot;
  entry->key = key;
  // The owner's size is its claim: the opened allocation must really be that large, or a copy within the
  // claimed bounds would run past our mapping into whatever lies beyond it in our own address space.
  auto info = detail::cuda::classify(opened, ref.size, MemoryKind::Cuda, "shm: cuda-ipc");
  if (!info || info->base != reinterpret_cast<std::uint64_t>(opened) || info->allocation_size < ref.size) {
    log::error("shm", "cuda-ipc: peer " + peer.name + " published an allocation of " +
                          std::to_string(ref.size) + " bytes, its handle opens less" +
                          (info ? "" : ": " + info.error().message()));
    *status = Status::RemoteAccess;
    return nullptr;  // entry's destructor closes it
  }
  entries_.push_back(entry);
  size_.store(entries_.size(), std::memory_order_relaxed);
  return entry;
}

void IpcCache::sweep(const PeerView& peer) {
  if (size_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(mutex_);
  sweep_locked(peer);
}

// Lets go of what the peer has revoked (its slot holds another key now, or none), so the owner's freed
// allocations are not held open here until we disconnect. Key 0: opened for a receive the peer posted,
// which no registration of its table names: kept until the view goes.
void IpcCache::sweep_locked(const PeerView& peer) {
  std::erase_if(entries_, [&](const auto& entry) {
    return entry->key != 0 && peer.ctl().slot[entry->slot].key.load(std::memory_order_acquire) != entry->key;
  });
  size_.store(entries_.size(), std::memory_order_relaxed);
}

Pieces pieces_of(std::span<const Segment> segments, std::uint32_t device_mask, std::uint64_t skip,
                 std::uint64_t length) {
  Pieces list;
  for (std::size_t i = 0; i < segments.size() && length; ++i) {
    const Segment& s = segments[i];
    std::uint64_t skipped = std::min<std::uint64_t>(s.length, skip);
    skip -= skipped;
    std::uint64_t take = std::min<std::uint64_t>(s.length - skipped, length);
    if (take) list.push_back(Piece{s.addr + skipped, take, ((device_mask >> i) & 1) != 0, nullptr});
    length -= take;
  }
  return list;
}

Status resolve_device(const PeerView& peer, const DeviceRef& ref, std::uint32_t slot, std::uint32_t key,
                      std::uint64_t addr, std::uint64_t length, Piece* out) {
  if (!(ref.flags & kDeviceMemory) || !covers(ref.base, ref.size, addr, length)) return Status::RemoteAccess;
  *out = Piece{addr, length, true, nullptr};
  if (peer.pid == ::getpid()) return Status::Success;  // two contexts of one process: the address is ours
  if (!(ref.flags & kDeviceHandle)) return Status::RemoteAccess;
  Status status = Status::Success;
  out->keep = peer.ipc.open(peer, ref, slot, key, &status);
  if (!out->keep) return status;
  out->addr = reinterpret_cast<std::uint64_t>(out->keep->here) + (addr - ref.base);
  return Status::Success;
}

Status move_pieces(const PeerView& peer, const Pieces& local, const Pieces& remote, bool write) {
  std::size_t l = 0, r = 0;
  std::uint64_t l_off = 0, r_off = 0;
  while (l < local.size() && r < remote.size()) {
    std::uint64_t n = std::min(local[l].length - l_off, remote[r].length - r_off);
    if (Status st = move_one(peer, local[l], remote[r], l_off, r_off, n, write); st != Status::Success)
      return st;
    l_off += n;
    r_off += n;
    if (l_off == local[l].length) ++l, l_off = 0;
    if (r_off == remote[r].length) ++r, r_off = 0;
  }
  return Status::Success;
}

Status device_atomic(std::uint64_t addr, Opcode opcode, std::uint64_t compare_add, std::uint64_t swap,
                     std::uint64_t* old_value) {
  auto old = detail::device_word_atomic(reinterpret_cast<void*>(addr), opcode != Opcode::FetchAdd,
                                        compare_add, swap, "shm: atomic on device memory");
  if (!old) {
    log::error("shm", old.error().message());
    return Status::RemoteOperation;
  }
  *old_value = *old;
  return Status::Success;
}

Status store_result(const Segment& result, bool device, std::uint64_t value) {
  if (device) return runtime_copy(reinterpret_cast<void*>(result.addr), &value, 8);
  std::memcpy(reinterpret_cast<void*>(result.addr), &value, 8);
  return Status::Success;
}

}  // namespace rdmakit::shm
