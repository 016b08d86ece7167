// Shareable memory: anonymous memfds (no name in any file system, so a process that dies leaves nothing
// behind: the memory goes with the last descriptor and the last mapping) and their mappings.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "rdmakit/error.hpp"
#include "transport/shm/fd.hpp"

namespace rdmakit::shm {

// A sealed-size memfd of `size` bytes (sparse: pages are allocated when first touched).
Result<UniqueFd> create_memfd(const char* name, std::size_t size);
// Maps `size` bytes of `fd` shared; `writable` false maps it read-only.
Result<Mapping> map_shared(int fd, std::size_t size, bool writable);

// The memory allocate() hands out: one big sparse memfd per context, mapped by every peer at connect,
// so memory allocated after a connection was made is reachable without the owner's help.
class Arena {
 public:
  // Virtual size: address space only, no memory is used until pages are touched.
  static constexpr std::size_t kDefaultSize = std::size_t{32} << 30;

  static Result<Arena> create(std::size_t size = kDefaultSize);

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
  Arena(UniqueFd fd, Mapping mapping) noexcept;
  static std::size_t round_up(std::size_t size) noexcept;

  UniqueFd fd_;
  Mapping mapping_;
  std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // offset -> length, adjacent ranges merged
  std::size_t bump_ = 0;                     // everything from here on was never handed out
};

}  // namespace rdmakit::shm
