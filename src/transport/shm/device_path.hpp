// The cuda-ipc path of the shm transport: CUDA device memory on either side of a WRITE, READ, SEND or
// atomic. The initiator reaches the peer's device memory through the CUDA IPC handle its owner published
// beside the registration (layout.hpp, DeviceSlot), opened once per (peer, allocation) and cached, and moves
// the bytes with the CUDA runtime (cudaMemcpy, cudaMemcpyDefault: device to device when both sides are
// device memory), the target's CPU uninvolved as with host memory. The CPU never dereferences device memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "rdmakit/completion.hpp"
#include "rdmakit/memory.hpp"
#include "transport/shm/layout.hpp"

namespace rdmakit::shm {

struct PeerView;

// One of the peer's allocations opened here (cudaIpcOpenMemHandle); closed when the last user lets go.
struct IpcMapping {
  std::byte* here = nullptr;  // our address of the allocation's first byte
  DeviceRef ref{};            // as the owner published it
  std::uint32_t slot = 0;     // the registration it was last opened or used for (the cache's sweep)
  std::uint32_t key = 0;
  IpcMapping() = default;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  ~IpcMapping();
};

// The opened allocations of one peer context, shared by every connection to it (PeerView). Entries whose
// registration the peer revoked are closed by the next sweep (at the end of each drain of a connection to
// the peer, and before each open; a copy under way keeps its own reference), the rest when the view goes
// (the last connection to the peer).
class IpcCache {
 public:
  // Our address of the owner's allocation `ref` (a registration `slot`/`key` published it). Null with
  // *status set when it cannot be opened or is smaller than the owner claims.
  std::shared_ptr<IpcMapping> open(const PeerView& peer, const DeviceRef& ref, std::uint32_t slot,
                                   std::uint32_t key, Status* status);
  // Closes what the peer revoked. Costs one relaxed load while nothing is open (host-only traffic).
  void sweep(const PeerView& peer);

 private:
  void sweep_locked(const PeerView& peer);
  std::mutex mutex_;
  std::vector<std::shared_ptr<IpcMapping>> entries_;
  std::atomic<std::size_t> size_{0};  // entries_.size(), for sweep()'s look without the lock
};

// A contiguous range of a transfer. Local pieces are addresses here; a remote piece is either device memory
// resolved to an address here (`device`, kept open by `keep`) or host memory at an address in the peer.
struct Piece {
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  bool device = false;
  std::shared_ptr<IpcMapping> keep;
};
using Pieces = std::vector<Piece>;

// `length` bytes of `segments` from byte `skip` on; `device_mask` bit i: segments[i] is device memory.
Pieces pieces_of(std::span<const Segment> segments, std::uint32_t device_mask, std::uint64_t skip,
                 std::uint64_t length);

// Resolves a remote device range [addr, addr+length) of the allocation `ref` (published for `slot`/`key`):
// the bounds are checked against the allocation first (a peer's claim is data), then the handle is opened
// (or, for a peer in this very process, the address is ours already).
Status resolve_device(const PeerView& peer, const DeviceRef& ref, std::uint32_t slot, std::uint32_t key,
                      std::uint64_t addr, std::uint64_t length, Piece* out);

// Moves the bytes: WRITE/SEND (`write`) local -> remote, READ remote -> local. Host-to-host pieces go as the
// host path does (mapped arena or cross-memory attach); anything with device memory through the runtime,
// bounced through host memory where the remote host memory is reachable only by cross-memory attach.
Status move_pieces(const PeerView& peer, const Pieces& local, const Pieces& remote, bool write);

// An 8-byte atomic on a word of device memory in this process: detail::device_word_atomic, the one
// read-modify-write through the runtime under a process-wide lock that tcp's atomics on device memory take
// too. Not atomic with respect to GPU kernels touching the word meanwhile.
Status device_atomic(std::uint64_t addr, Opcode opcode, std::uint64_t compare_add, std::uint64_t swap,
                     std::uint64_t* old_value);

// Stores an atomic's 8-byte result into the local result segment, device memory or not.
Status store_result(const Segment& result, bool device, std::uint64_t value);

}  // namespace rdmakit::shm
