#include "transport/shm/peer.hpp"

#include <sys/eventfd.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/copy.hpp"
#include "core/log.hpp"
#include "transport/shm/registry.hpp"

namespace rdmakit::shm {
namespace {

// An iovec list; kMaxSge on each side is enforced at post time (+1 spare for the single remote range).
struct IoList {
  std::array<iovec, kMaxSge + 1> iov{};
  std::size_t count = 0;

  void add(std::uint64_t addr, std::uint64_t length) {
    if (length) iov[count++] = iovec{reinterpret_cast<void*>(addr), length};
  }
  // `length` bytes of `segments` from byte `skip` on.
  static IoList of(std::span<const Segment> segments, std::uint64_t skip, std::uint64_t length) {
    IoList list;
    for (const Segment& s : segments) {
      std::uint64_t skipped = std::min<std::uint64_t>(s.length, skip);
      skip -= skipped;
      std::uint64_t take = std::min<std::uint64_t>(s.length - skipped, length);
      list.add(s.addr + skipped, take);
      length -= take;
    }
    return list;
  }
  void advance(std::size_t bytes) {
    std::size_t first = 0;
    while (first < count && bytes >= iov[first].iov_len) bytes -= iov[first++].iov_len;
    if (first < count) {
      iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + bytes;
      iov[first].iov_len -= bytes;
    }
    std::copy(iov.begin() + first, iov.begin() + count, iov.begin());
    count -= first;
  }
  // Rewrites every entry to our mapping of the peer's arena; false when one is outside it.
  bool translate(const PeerView& peer, bool write) {
    for (std::size_t i = 0; i < count; ++i) {
      std::byte* mine =
          peer.translate(reinterpret_cast<std::uint64_t>(iov[i].iov_base), iov[i].iov_len, write);
      if (!mine) return false;
      iov[i].iov_base = mine;
    }
    return true;
  }
};

void copy_lists(IoList dst, IoList src, bool streaming) {
  std::size_t d = 0, s = 0, d_off = 0, s_off = 0;
  while (d < dst.count && s < src.count) {
    std::size_t n = std::min(dst.iov[d].iov_len - d_off, src.iov[s].iov_len - s_off);
    detail::copy_bytes(static_cast<std::byte*>(dst.iov[d].iov_base) + d_off,
                       static_cast<const std::byte*>(src.iov[s].iov_base) + s_off, n, streaming);
    d_off += n;
    s_off += n;
    if (d_off == dst.iov[d].iov_len) ++d, d_off = 0;
    if (s_off == src.iov[s].iov_len) ++s, s_off = 0;
  }
}

Status status_of_errno(int err, pid_t pid) {
  if (err == ESRCH) return Status::TransportRetryExceeded;  // the peer process is gone
  if (err == EFAULT) return Status::RemoteAccess;           // registered, but no longer mapped there
  log::error("shm", "cross-memory attach to pid " + std::to_string(pid) + " failed: " + std::strerror(err) +
                        (err == EPERM
                             ? " (ptrace access denied: same user and kernel.yama.ptrace_scope <= 1 needed, "
                               "or use Context::allocate memory)"
                             : ""));
  return Status::RemoteOperation;
}

// process_vm_writev/readv move what they can; a partial count means a fault boundary, so retry the rest
// until no progress is made.
Status cross_memory(const PeerView& peer, IoList local, IoList remote, bool write) {
  while (local.count && remote.count) {
    ssize_t n =
        write
            ? ::process_vm_writev(peer.pid, local.iov.data(), local.count, remote.iov.data(), remote.count, 0)
            : ::process_vm_readv(peer.pid, local.iov.data(), local.count, remote.iov.data(), remote.count, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return status_of_errno(n < 0 ? errno : EFAULT, peer.pid);
    local.advance(static_cast<std::size_t>(n));
    remote.advance(static_cast<std::size_t>(n));
  }
  return Status::Success;
}

Status move(const PeerView& peer, IoList local, IoList remote, bool write, bool streaming) {
  IoList mapped = remote;
  if (mapped.translate(peer, write)) {
    if (write)
      copy_lists(mapped, local, streaming);
    else
      copy_lists(local, mapped, streaming);
    return Status::Success;
  }
  return cross_memory(peer, local, remote, write);
}

}  // namespace

std::byte* ArenaView::translate(std::uint64_t addr, std::uint64_t length) const noexcept {
  if (!mapping.data() || !covers(base, mapping.size(), addr, length)) return nullptr;
  return mapping.data() + (addr - base);
}

std::byte* PeerView::translate(std::uint64_t addr, std::uint64_t length, bool write) const noexcept {
  if (std::byte* mine = writable.translate(addr, length)) return mine;
  return write ? nullptr : read_only.translate(addr, length);
}

void PeerView::ring(bool always) const noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the sleeper's fence (progress.cpp)
  if (!always && !needs_doorbell(ctl())) return;
  eventfd_write(doorbell.get(), 1);
}

namespace {

// The common small case: one local segment and memory the peer shares by mapping, so a plain memcpy with
// no I/O lists (callgrind: building and copying the lists was a quarter of an 8-byte WRITE's instructions).
bool move_direct(const PeerView& peer, std::span<const Segment> local, std::uint64_t skip, std::uint64_t addr,
                 std::uint64_t length, bool write, bool streaming) {
  if (local.size() != 1 || skip > local[0].length || local[0].length - skip < length) return false;
  std::byte* mapped = peer.translate(addr, length, write);
  if (!mapped) return false;
  auto* mine = reinterpret_cast<std::byte*>(local[0].addr + skip);
  if (write)
    detail::copy_bytes(mapped, mine, length, streaming);
  else
    detail::copy_bytes(mine, mapped, length, streaming);
  return true;
}

}  // namespace

Status write_remote(const PeerView& peer, std::span<const Segment> local, std::uint64_t skip,
                    std::uint64_t addr, std::uint64_t length, bool streaming) {
  if (move_direct(peer, local, skip, addr, length, true, streaming)) return Status::Success;
  IoList remote;
  remote.add(addr, length);
  return move(peer, IoList::of(local, skip, length), remote, true, streaming);
}

Status read_remote(const PeerView& peer, std::span<const Segment> local, std::uint64_t skip,
                   std::uint64_t addr, std::uint64_t length, bool streaming) {
  if (move_direct(peer, local, skip, addr, length, false, streaming)) return Status::Success;
  IoList remote;
  remote.add(addr, length);
  return move(peer, IoList::of(local, skip, length), remote, false, streaming);
}

Status cross_memory_range(const PeerView& peer, void* local, std::uint64_t addr, std::uint64_t length,
                          bool write) {
  IoList mine, theirs;
  mine.add(reinterpret_cast<std::uint64_t>(local), length);
  theirs.add(addr, length);
  return cross_memory(peer, mine, theirs, write);
}

Status write_scattered(const PeerView& peer, std::span<const Segment> local, std::span<const Segment> remote,
                       std::uint64_t length) {
  // A receive of one segment (the common case) is one remote range: the direct path when the local side
  // is one segment too (callgrind: the I/O lists were 40 % of an 8-byte SEND's post).
  if (remote.size() == 1 && remote[0].length >= length)
    return write_remote(peer, local, 0, remote[0].addr, length, detail::streams(length));
  return move(peer, IoList::of(local, 0, length), IoList::of(remote, 0, length), true,
              detail::streams(length));
}

void atomic_on(std::uint64_t* word, Opcode opcode, std::uint64_t compare_add, std::uint64_t swap,
               std::uint64_t* old_value) noexcept {
  std::atomic_ref<std::uint64_t> target(*word);
  if (opcode == Opcode::FetchAdd) {
    *old_value = target.fetch_add(compare_add, std::memory_order_seq_cst);
  } else {
    std::uint64_t expected = compare_add;
    target.compare_exchange_strong(expected, swap, std::memory_order_seq_cst);
    *old_value = expected;  // the value found, whether or not it was swapped
  }
}

}  // namespace rdmakit::shm
