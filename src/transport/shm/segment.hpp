// Shareable memory: anonymous memfds (no name in any file system, so a process that dies leaves nothing
// behind: the memory goes with the last descriptor and the last mapping) and their mappings.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "rdmakit/error.hpp"
#include "transport/shm/fd.hpp"

namespace rdmakit::shm {

// A memfd of `size` bytes (sparse: pages are allocated when first touched), sealed against shrinking and
// growing. Not yet sealed for good: the creator maps it, then calls seal_memfd().
Result<UniqueFd> create_memfd(const char* name, std::size_t size);
// Seals `fd` for good (F_SEAL_SEAL). `read_only_for_others`: also F_SEAL_FUTURE_WRITE, so that the mappings
// the creator already holds stay writable but nobody (a peer holding the descriptor included) can map it
// writable, mprotect a read-only mapping to writable, or write() it from now on.
Result<void> seal_memfd(int fd, const char* name, bool read_only_for_others);
// What a memfd received from a peer must be before we map it: a memfd of exactly `size` bytes sealed
// against shrinking (else the peer could truncate it under our mapping and kill us with SIGBUS).
Result<void> check_received_memfd(int fd, std::size_t size, const char* what);
// Maps `size` bytes of `fd` shared; `writable` false maps it read-only.
Result<Mapping> map_shared(int fd, std::size_t size, bool writable);

// The memory allocate() hands out: big sparse memfds per context, one per kind of remote right, so that
// memory allocated after a connection was made is reachable without the owner's help, and a peer maps
// only what was registered for remote access, with no more rights than were granted (context.hpp).
class Arena {
 public:
  // Virtual size: address space only, no memory is used until pages are touched.
  static constexpr std::size_t kDefaultSize = std::size_t{24} << 30;
  static constexpr std::size_t kSmallSize = std::size_t{4} << 30;

  // What peers may do with the arena's descriptor.
  enum class Sharing {
    Writable,  // peers map it read-write (RemoteWrite / RemoteAtomic regions)
    ReadOnly,  // sealed with F_SEAL_FUTURE_WRITE: peers can only map it read-only (RemoteRead regions)
    Private,   // never sent to a peer (regions with no remote right)
  };

  static Result<Arena> create(std::size_t size = kDefaultSize, Sharing sharing = Sharing::Writable);

  // Page-aligned, zeroed memory of at least `size` bytes.
  Result<void*> allocate(std::size_t size);
  // Returns memory to the arena; its pages are freed (and read as zeros when reused).
  void free(void* memory, std::size_t size) noexcept;

  int fd() const noexcept { return fd_.get(); }
  std::uint64_t base() const noexcept { return reinterpret_cast<std::uint64_t>(mapping_.data()); }
  std::size_t size() const noexcept { return mapping_.size(); }

  Arena(Arena&&) noexcept;
  Arena& operator=(Arena&&) = delete;
  ~Arena();

 private:
  Arena(UniqueFd fd, Mapping mapping, Sharing sharing) noexcept;
  static std::size_t round_up(std::size_t size) noexcept;
  // Makes [offset, offset+length) read as zeros and frees its pages where the seals allow it.
  void zero(std::size_t offset, std::size_t length) noexcept;

  UniqueFd fd_;
  Mapping mapping_;
  Sharing sharing_;
  std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // offset -> length, adjacent ranges merged
  std::size_t bump_ = 0;                     // everything from here on was never handed out
};

}  // namespace rdmakit::shm
