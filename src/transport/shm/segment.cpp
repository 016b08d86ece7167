#include "transport/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <string>

namespace rdmakit::shm {

Result<UniqueFd> create_memfd(const char* name, std::size_t size) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return fail_errno(std::string("shm: memfd_create ") + name, errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return fail_errno(std::string("shm: ftruncate of memfd ") + name + " to " + std::to_string(size), errno);
  // Peers map it by size: forbid shrinking it under them (a SIGBUS in a peer otherwise).
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return fail_errno(std::string("shm: sealing memfd ") + name, errno);
  return fd;
}

Result<Mapping> map_shared(int fd, std::size_t size, bool writable) {
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* base = ::mmap(nullptr, size, prot, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) return fail_errno("shm: mmap of " + std::to_string(size) + " shared bytes", errno);
  return Mapping(base, size);
}

Arena::Arena(UniqueFd fd, Mapping mapping) noexcept : fd_(std::move(fd)), mapping_(std::move(mapping)) {}
Arena::Arena(Arena&& other) noexcept
    : fd_(std::move(other.fd_)),
      mapping_(std::move(other.mapping_)),
      free_(std::move(other.free_)),
      bump_(other.bump_) {}
Arena::~Arena() = default;

Result<Arena> Arena::create(std::size_t size) {
  auto fd = create_memfd("rdmakit-shm-arena", size);
  if (!fd) return std::unexpected(fd.error());
  auto mapping = map_shared(fd->get(), size, true);
  if (!mapping) return std::unexpected(mapping.error());
  return Arena(std::move(*fd), std::move(*mapping));
}

std::size_t Arena::round_up(std::size_t size) noexcept {
  constexpr std::size_t kPage = 4096;
  return (size + kPage - 1) & ~(kPage - 1);
}

Result<void*> Arena::allocate(std::size_t size) {
  if (size == 0 || size > mapping_.size())
    return fail(Errc::InvalidArgument, "allocate: size " + std::to_string(size) + " out of range");
  std::size_t need = round_up(size);
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {  // first fit
    if (it->second < need) continue;
    std::size_t offset = it->first;
    std::size_t left = it->second - need;
    free_.erase(it);
    if (left) free_.emplace(offset + need, left);
    return static_cast<void*>(mapping_.data() + offset);
  }
  if (need > mapping_.size() - bump_)
    return fail(Errc::ResourceExhausted, "allocate: the shm arena (" + std::to_string(mapping_.size()) +
                                             " bytes) has no room for " + std::to_string(size) +
                                             " more bytes");
  std::size_t offset = bump_;
  bump_ += need;
  return static_cast<void*>(mapping_.data() + offset);
}

void Arena::free(void* memory, std::size_t size) noexcept {
  std::size_t offset = static_cast<std::size_t>(static_cast<std::byte*>(memory) - mapping_.data());
  std::size_t length = round_up(size);
  // Frees the pages and makes them read as zeros, which is what allocate() promises for reuse.
  ::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(length));
  std::lock_guard lock(mutex_);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      return;
    }
  }
  free_.emplace(offset, length);
}

}  // namespace rdmakit::shm
