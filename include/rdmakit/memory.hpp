// Registered memory: access rights, local segments and remote descriptors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit {

namespace detail {
class MemoryRegionProvider;  // src/transport/provider.hpp: what a transport implements
}

// Access rights, with the bit values of ibv_access_flags so the verbs transport passes them through
// unchanged.
enum class Access : std::uint32_t {
  None = 0,
  LocalWrite = 1,    // IBV_ACCESS_LOCAL_WRITE: READ results, atomic results and receives may land here
  RemoteWrite = 2,   // IBV_ACCESS_REMOTE_WRITE
  RemoteRead = 4,    // IBV_ACCESS_REMOTE_READ
  RemoteAtomic = 8,  // IBV_ACCESS_REMOTE_ATOMIC
  All = 15,
};
constexpr Access operator|(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr bool has(Access set, Access wanted) noexcept {
  return (static_cast<std::uint32_t>(set) & static_cast<std::uint32_t>(wanted)) ==
         static_cast<std::uint32_t>(wanted);
}
RDMAKIT_API std::string to_string(Access access);

// Where registered memory lives. Auto asks CUDA when the process has loaded a CUDA driver (device memory
// cannot exist otherwise), so a program that never uses a GPU never loads CUDA.
enum class MemoryKind : std::uint8_t {
  Host,  // CPU memory
  Cuda,  // CUDA device memory (cudaMalloc, a caching allocator's blocks, VMM): refused if it is not
  Auto,  // detect
};
RDMAKIT_API std::string to_string(MemoryKind kind);

// The path the bytes of a region take, chosen at registration (never silently changed later). Device
// memory takes one of the last four (docs/gpu.md); option gpu_path (auto|direct|staged) can require one.
enum class MemoryPath : std::uint8_t {
  Host,              // host memory: the transport's own path
  GpuDirectDmabuf,   // verbs: the NIC reaches device memory through a dmabuf export of the allocation
  GpuDirectPeermem,  // verbs: ... through the nvidia_peermem kernel module
  CudaIpc,           // shm: the peer maps the allocation through CUDA IPC; copies are device-to-device
  Staged,            // copied through pinned host memory by the transport (tcp; verbs without GPUDirect)
};
RDMAKIT_API std::string to_string(MemoryPath path);  // "host", "gpudirect-dmabuf", ..., "staged"

// One entry of a scatter-gather list. Same layout as struct ibv_sge, so verbs posts it as is: the length
// is 32 bits, so one Segment covers less than 4 GiB (kMaxSegmentLength); a larger range is posted as
// several operations (message sizes are capped lower anyway: Capabilities::max_message_size).
struct Segment {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};
inline constexpr std::uint64_t kMaxSegmentLength = 0xffffffffu;

// Where a one-sided operation lands: an address and key at the peer, plus the epoch of the peer's
// context that issued the key. A nonzero epoch that is not the connected peer's makes the post fail
// with Errc::StaleDescriptor instead of touching memory that a new life of the peer may have reused.
struct RemoteAddress {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t owner_epoch = 0;  // 0: not checked (an address the caller built by hand)
};

// A remote descriptor: everything a peer needs to reach a registered region. Plain data; it travels to
// the peer by any means (a SEND, a file, a rendezvous store) as the bytes of serialize().
struct RDMAKIT_API RemoteRegion {
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t rkey = 0;
  Access access = Access::None;
  std::uint64_t owner_id = 0;     // the owner context's identity (hash of its name)
  std::uint64_t owner_epoch = 0;  // unique per life of the owner's context

  static constexpr std::size_t kSerializedSize = 48;
  using Bytes = std::array<std::byte, kSerializedSize>;

  // The remote address `offset` bytes into the region. No bounds check here: the target checks,
  // as an RDMA NIC does, and a stray offset completes with Status::RemoteAccess.
  RemoteAddress at(std::uint64_t offset = 0) const noexcept {
    return RemoteAddress{addr + offset, rkey, owner_epoch};
  }
  // The same, checked here: [offset, offset + length) must lie inside the region (InvalidArgument
  // naming the range otherwise), so a bad offset is an error at the caller instead of a failed completion.
  Result<RemoteAddress> at(std::uint64_t offset, std::uint64_t length) const;
  Bytes serialize() const noexcept;
  // Rejects bytes that are not a descriptor (wrong size, magic or version).
  static Result<RemoteRegion> deserialize(std::span<const std::byte> bytes);
  // Hex text of serialize(), for command lines and files.
  std::string to_hex() const;
  static Result<RemoteRegion> from_hex(std::string_view hex);
};

// A registered region of caller memory. Deregistered when the last reference goes; the caller's
// memory must outlive it. Obtained from Context::register_memory. Only the library makes one (a transport's
// region derives from detail::MemoryRegionProvider).
class RDMAKIT_API MemoryRegion {
 public:
  virtual ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  Access access() const noexcept { return access_; }
  std::uint32_t lkey() const noexcept { return lkey_; }
  std::uint32_t rkey() const noexcept { return rkey_; }
  // Where the memory lives (Host or Cuda, never Auto), its device (-1 for host memory) and the path its
  // bytes take.
  MemoryKind kind() const noexcept { return kind_; }
  int device() const noexcept { return device_; }
  MemoryPath path() const noexcept { return path_; }

  // A segment `length` bytes long at `offset`. Not checked here: an operation that uses a segment
  // outside the region completes with Status::LocalProtection, as verbs does. The length is a
  // Segment's 32 bits; segment() takes a 64-bit length and checks it.
  Segment slice(std::uint64_t offset, std::uint32_t length) const noexcept {
    return Segment{reinterpret_cast<std::uint64_t>(data_) + offset, length, lkey_};
  }
  // A segment checked here: [offset, offset + length) inside the region and length <= kMaxSegmentLength,
  // else InvalidArgument saying which (never a silently shortened segment).
  Result<Segment> segment(std::uint64_t offset, std::uint64_t length) const;
  // The whole region as one segment: an error for a region of 4 GiB or more, which no Segment can hold
  // (post it as slices of at most kMaxSegmentLength bytes).
  Result<Segment> whole() const { return segment(0, size_); }
  // The descriptor a peer needs to reach this region.
  RemoteRegion descriptor() const noexcept { return descriptor_; }

 private:
  friend class detail::MemoryRegionProvider;
  MemoryRegion(void* data, std::size_t size, Access access, std::uint32_t lkey, std::uint32_t rkey,
               std::uint64_t owner_id, std::uint64_t owner_epoch) noexcept
      : data_(data),
        size_(size),
        access_(access),
        lkey_(lkey),
        rkey_(rkey),
        descriptor_{reinterpret_cast<std::uint64_t>(data), size, rkey, access, owner_id, owner_epoch} {}

  void* data_;
  std::size_t size_;
  Access access_;
  std::uint32_t lkey_;
  std::uint32_t rkey_;
  RemoteRegion descriptor_;
  MemoryKind kind_ = MemoryKind::Host;
  MemoryPath path_ = MemoryPath::Host;
  int device_ = -1;
};

}  // namespace rdmakit
