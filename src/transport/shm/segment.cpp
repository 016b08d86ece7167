#include "transport/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace rdmakit::shm {

Result<UniqueFd> create_memfd(const char* name, std::size_t size) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return fail_errno(std::string("shm: memfd_create ") + name, errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return fail_errno(std::string("shm: ftruncate of memfd ") + name + " to " + std::to_string(size), errno);
  // Peers map it by size: forbid shrinking it under them (a SIGBUS in a peer otherwise).
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    return fail_errno(std::string("shm: sealing memfd ") + name, errno);
  return fd;
}

Result<void> seal_memfd(int fd, const char* name, bool read_only_for_others) {
  int seals = F_SEAL_SEAL | (read_only_for_others ? F_SEAL_FUTURE_WRITE : 0);
  if (::fcntl(fd, F_ADD_SEALS, seals) != 0)
    return fail_errno(std::string("shm: sealing memfd ") + name + (read_only_for_others ? " read-only" : ""),
                      errno);
  return {};
}

Result<void> check_received_memfd(int fd, std::size_t size, const char* what) {
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0)
    return fail(Errc::ProtocolError, std::string("shm handshake: the peer's ") + what +
                                         " is not a sealable memfd (F_GET_SEALS: " + std::strerror(errno) +
                                         ")");
  if (!(seals & F_SEAL_SHRINK))
    return fail(Errc::ProtocolError, std::string("shm handshake: the peer's ") + what +
                                         " is not sealed against shrinking (F_SEAL_SHRINK): it could be "
                                         "truncated under our mapping");
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail_errno(std::string("shm handshake: fstat of the peer's ") + what, errno);
  if (static_cast<std::uint64_t>(st.st_size) != size)
    return fail(Errc::ProtocolError, std::string("shm handshake: the peer's ") + what + " has " +
                                         std::to_string(st.st_size) + " bytes, expected " +
                                         std::to_string(size));
  return {};
}

Result<Mapping> map_shared(int fd, std::size_t size, bool writable) {
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* base = ::mmap(nullptr, size, prot, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) return fail_errno("shm: mmap of " + std::to_string(size) + " shared bytes", errno);
  return Mapping(base, size);
}

Arena::Arena(UniqueFd fd, Mapping mapping, Sharing sharing) noexcept
    : fd_(std::move(fd)), mapping_(std::move(mapping)), sharing_(sharing) {}
Arena::Arena(Arena&& other) noexcept
    : fd_(std::move(other.fd_)),
      mapping_(std::move(other.mapping_)),
      sharing_(other.sharing_),
      free_(std::move(other.free_)),
      bump_(other.bump_) {}
Arena::~Arena() = default;

Result<Arena> Arena::create(std::size_t size, Sharing sharing) {
  const char* name = sharing == Sharing::Writable   ? "rdmakit-shm-arena-rw"
                     : sharing == Sharing::ReadOnly ? "rdmakit-shm-arena-ro"
                                                    : "rdmakit-shm-arena-private";
  auto fd = create_memfd(name, size);
  if (!fd) return std::unexpected(fd.error());
  auto mapping = map_shared(fd->get(), size, true);
  if (!mapping) return std::unexpected(mapping.error());
  // Our own mapping stays writable; a peer given the read-only arena cannot map it writable.
  if (auto sealed = seal_memfd(fd->get(), name, sharing == Sharing::ReadOnly); !sealed)
    return std::unexpected(sealed.error());
  return Arena(std::move(*fd), std::move(*mapping), sharing);
}

void Arena::zero(std::size_t offset, std::size_t length) noexcept {
  // F_SEAL_FUTURE_WRITE forbids punching holes too, so the read-only arena is zeroed by hand (through our
  // writable mapping) and keeps its pages.
  if (sharing_ == Sharing::ReadOnly) {
    std::memset(mapping_.data() + offset, 0, length);
    return;
  }
  ::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(length));
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
    // A peer with a writable mapping may have written into free memory: what allocate() hands out reads
    // as zeros whatever happened to it before.
    if (sharing_ == Sharing::Writable) zero(offset, need);
    return static_cast<void*>(mapping_.data() + offset);
  }
  if (need > mapping_.size() - bump_)
    return fail(Errc::ResourceExhausted, "allocate: the shm arena (" + std::to_string(mapping_.size()) +
                                             " bytes) has no room for " + std::to_string(size) +
                                             " more bytes");
  std::size_t offset = bump_;
  bump_ += need;
  if (sharing_ == Sharing::Writable) zero(offset, need);
  return static_cast<void*>(mapping_.data() + offset);
}

void Arena::free(void* memory, std::size_t size) noexcept {
  std::size_t offset = static_cast<std::size_t>(static_cast<std::byte*>(memory) - mapping_.data());
  std::size_t length = round_up(size);
  // Frees the pages and makes them read as zeros, which is what allocate() promises for reuse (and no peer
  // reads what the region held once it is gone).
  zero(offset, length);
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
