#include "coll/shared.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <thread>

#include "coll/reduce.hpp"
#include "coll/schedule.hpp"
#include "core/copy.hpp"

namespace rdmakit::coll::detail {
namespace {

using Clock = std::chrono::steady_clock;
using rdmakit::detail::copy_bytes;
constexpr std::size_t kHeader = 4096;           // the control block's page; the buffers follow
constexpr std::size_t kReduceBlock = 16 << 10;  // bytes reduced at a time: the partial result stays in L1
// Streaming stores for the result once every rank's input and result no longer fit in the caches
// (bench/coll: at 64 MiB on 2 ranks they gained ~10%; below, cached stores won).
constexpr std::size_t kStreamingWorkingSet = 64u << 20;
constexpr auto kSleepSlice = std::chrono::milliseconds(2);

// What each rank tells the others about its area (allgathered once).
struct AreaRecord {
  std::uint64_t addr = 0;
  std::uint64_t epoch = 0;
  std::uint32_t rkey = 0;
  std::uint32_t ok = 0;  // 0: this rank has no area
};

std::atomic_ref<std::uint32_t> word(std::uint32_t& w) { return std::atomic_ref<std::uint32_t>(w); }

// The futex is not private: the ranks are processes mapping the same memfd at different addresses.
void futex_wait(std::uint32_t* address, std::uint32_t expected, std::chrono::nanoseconds limit) {
  timespec ts{static_cast<time_t>(limit.count() / 1000000000), static_cast<long>(limit.count() % 1000000000)};
  syscall(SYS_futex, address, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::uint32_t* address) {
  syscall(SYS_futex, address, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Wrap-safe "generation g has reached target t".
bool reached(std::uint32_t g, std::uint32_t t) { return static_cast<std::int32_t>(g - t) >= 0; }

}  // namespace

// One cache line per word that different ranks write, so arrivals do not bounce the waiters' line.
struct SharedArea::Control {
  alignas(64) std::uint32_t arrived;     // group rank 0's: ranks in the current barrier
  alignas(64) std::uint32_t generation;  // group rank 0's: barriers completed
  alignas(64) std::uint32_t sleepers;    // group rank 0's: waiters asleep on `generation`
  alignas(64) std::uint32_t entered;     // each rank's own: barriers it entered (for diagnosis)
  alignas(64) std::uint32_t call[2];     // each rank's own: its calls' signatures, by parity
};

SharedArea::SharedArea(std::shared_ptr<MemoryRegion> mine, std::vector<std::byte*> areas, int rank,
                       std::size_t round)
    : mine_(std::move(mine)),
      areas_(std::move(areas)),
      rank_(rank),
      size_(static_cast<int>(areas_.size())),
      round_(round),
      scratch_(kReduceBlock) {}

SharedArea::~SharedArea() = default;

SharedArea::Control& SharedArea::control(int member) const noexcept {
  static_assert(sizeof(Control) <= kHeader);
  return *reinterpret_cast<Control*>(areas_[static_cast<std::size_t>(member)]);
}

Result<std::unique_ptr<SharedArea>> SharedArea::create(Exchange& ex, std::size_t round_bytes) {
  int n = ex.size(), r = ex.rank();
  // 1. My area, where every peer is reached over a transport that maps memory.
  std::shared_ptr<MemoryRegion> mine;
  Fabric* fabric = nullptr;
  bool usable = true;
  for (int m = 0; m < n && usable; ++m) {
    if (m == r) continue;
    Peer& p = ex.peer(ex.world_rank(m));
    usable = p.fabric && p.connection && (!fabric || fabric == p.fabric);
    fabric = p.fabric;
  }
  if (usable && fabric) {
    auto region = fabric->context->allocate(kHeader + 2 * round_bytes, Access::All);
    if (region) mine = std::move(*region);
    // The control block starts clean: memory an earlier area of this process left (a barrier count, a
    // call word after a failure) must not count here. Peers touch it only after the allgather below.
    if (mine) std::memset(mine->data(), 0, kHeader);
  }
  AreaRecord record{};
  if (mine)
    record = AreaRecord{reinterpret_cast<std::uint64_t>(mine->data()), mine->descriptor().owner_epoch,
                        mine->rkey(), 1};
  // 2. Everyone's records, then each maps the peers' areas.
  std::vector<AreaRecord> records(static_cast<std::size_t>(n));
  Buffers gather{reinterpret_cast<const std::byte*>(&record), reinterpret_cast<std::byte*>(records.data()),
                 sizeof(AreaRecord), DataType::U8};
  if (auto ok = allgather_ring(ex, gather); !ok) return std::unexpected(ok.error());
  std::vector<std::byte*> areas(static_cast<std::size_t>(n), nullptr);
  std::int32_t mapped = mine ? 1 : 0;
  for (int m = 0; m < n && mapped; ++m) {
    const AreaRecord& rec = records[static_cast<std::size_t>(m)];
    if (!rec.ok) {
      mapped = 0;
    } else if (m == r) {
      areas[static_cast<std::size_t>(m)] = static_cast<std::byte*>(mine->data());
    } else {
      RemoteAddress remote{rec.addr, rec.rkey, rec.epoch};
      auto at = ex.peer(ex.world_rank(m))
                    .connection->map_remote(remote, kHeader + 2 * round_bytes,
                                            Access::RemoteRead | Access::RemoteWrite);
      if (at)
        areas[static_cast<std::size_t>(m)] = *at;
      else
        mapped = 0;  // shm maps only allocate() memory: another transport says NotSupported
    }
  }
  // 3. All or none.
  std::int32_t all = mapped;
  Buffers agreement{reinterpret_cast<const std::byte*>(&mapped), reinterpret_cast<std::byte*>(&all), 1,
                    DataType::I32, ReduceOp::Min};
  if (auto ok = allreduce_doubling(ex, agreement); !ok) return std::unexpected(ok.error());
  if (!all) return std::unique_ptr<SharedArea>();
  return std::unique_ptr<SharedArea>(new SharedArea(std::move(mine), std::move(areas), r, round_bytes));
}

std::byte* SharedArea::buffer(int member, int parity) const noexcept {
  return areas_[static_cast<std::size_t>(member)] + kHeader + static_cast<std::size_t>(parity) * round_;
}

// A member that sent a chunk of another call (a staged collective, or the barrier of a communicator that
// closes) while this barrier is still open is not coming: it runs another collective. Checked after
// `done`: a member that passed this barrier may already send the next collective's chunks.
template <typename Done>
Result<void> SharedArea::foreign(Exchange& ex, const Done& done) const {
  for (int m = 0; m < size_; ++m) {
    if (m == rank_) continue;
    auto theirs = ex.pending_call(ex.world_rank(m));
    if (theirs && *theirs != ex.call_signature() && !done())
      return std::unexpected(ex.mismatched(ex.world_rank(m), *theirs));
  }
  return {};
}

Result<void> SharedArea::barrier(Exchange& ex) {
  Control& root = control(0);
  std::uint32_t target = ++barriers_;
  word(control(rank_).entered).store(target, std::memory_order_release);
  if (word(root.arrived).fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(size_)) {
    word(root.arrived).store(0, std::memory_order_relaxed);  // ordered before the release below
    word(root.generation).store(target, std::memory_order_seq_cst);
    if (word(root.sleepers).load(std::memory_order_seq_cst) > 0) futex_wake_all(&root.generation);
    return {};
  }
  auto done = [&] { return reached(word(root.generation).load(std::memory_order_acquire), target); };
  // The first rank that has not entered this barrier: whom a timeout blames.
  auto missing = [&] {
    for (int m = 0; m < size_; ++m)
      if (!reached(word(control(m).entered).load(std::memory_order_acquire), target)) return ex.world_rank(m);
    return ex.world_rank(0);
  };
  auto now = Clock::now();
  auto spin_until = now + ex.spin(), deadline = now + ex.timeout();
  for (unsigned i = 0;; ++i) {
    if (done()) return {};
    if (i % 64 == 0) {
      if (auto ok = ex.poll(missing()); !ok) return ok;
      if (auto ok = foreign(ex, done); !ok) return ok;
    }
    now = Clock::now();
    if (now >= deadline) return std::unexpected(ex.stalled(missing(), "the shared-memory barrier with"));
    if (now < spin_until) {
      std::this_thread::yield();
      continue;
    }
    // Dekker with the last arriver: it publishes the generation, then looks at sleepers; we publish
    // ourselves as a sleeper, then look at the generation (and the futex checks it once more).
    word(root.sleepers).fetch_add(1, std::memory_order_seq_cst);
    std::uint32_t seen = word(root.generation).load(std::memory_order_seq_cst);
    if (!reached(seen, target)) futex_wait(&root.generation, seen, kSleepSlice);
    word(root.sleepers).fetch_sub(1, std::memory_order_seq_cst);
    i = 63;  // poll the Exchange after every sleep
  }
}

// Slice `slice` (elements of this round, which starts at element `first`) reduced from every rank's
// input: this rank's own from its send buffer (it never copied it in), the others' from their buffers.
// Each block is reduced into `scratch_` (L1), then stored to `result` (if any) and to this rank's buffer.
void SharedArea::reduce_slice(const Buffers& b, std::size_t first, Block slice, int parity, std::byte* result,
                              bool streaming) {
  std::size_t e = size_of(b.type);
  std::size_t step = kReduceBlock / e;
  std::byte* shared_result = buffer(rank_, parity) + slice.offset * e;
  std::byte* partial = scratch_.data();
  for (std::size_t done = 0; done < slice.count; done += step) {
    std::size_t count = std::min(step, slice.count - done);
    std::size_t at = (slice.offset + done) * e;  // byte offset within the round
    const std::byte* own = b.send + first * e + at;
    for (int k = 1; k < size_; ++k) {
      int m = (rank_ + k) % size_;
      detail::reduce(partial, k == 1 ? own : partial, buffer(m, parity) + at, count, b.type, b.op);
    }
    if (b.op == ReduceOp::Avg) finish_average(partial, count, b.type, size_);
    if (result) copy_bytes(result + first * e + at, partial, count * e, streaming);
    std::memcpy(shared_result + done * e, partial, count * e);
  }
}

// One round of a reduction: the whole result lands at every rank (root < 0) or at `root` only.
Result<void> SharedArea::reduce_round(Exchange& ex, const Buffers& b, std::size_t first, std::size_t count,
                                      int root, int check) {
  std::size_t e = size_of(b.type);
  int parity = parity_;
  parity_ ^= 1;
  Block own = partition(count, size_, rank_);
  // 1. The input, all but this rank's own slice, into this rank's buffer.
  std::byte* mine = buffer(rank_, parity);
  std::size_t after = own.offset + own.count;
  if (count > 0) {  // an empty call has one round without data: its barriers and the check
    const std::byte* input = b.send + first * e;
    std::memcpy(mine, input, own.offset * e);
    std::memcpy(mine + after * e, input + after * e, (count - after) * e);
  }
  if (auto ok = barrier(ex); !ok) return ok;
  if (check >= 0)
    if (auto ok = agree(ex, check); !ok) return ok;
  // 2. This rank's slice, from everyone. A result larger than the caches goes out with streaming stores
  // (no read-for-ownership of lines that are written whole and not read again here).
  bool receives = root < 0 || root == rank_;
  bool streaming = b.count * e * static_cast<std::size_t>(size_) >= kStreamingWorkingSet;
  reduce_slice(b, first, own, parity, receives ? b.recv : nullptr, streaming);
  if (auto ok = barrier(ex); !ok) return ok;
  // 3. The other slices of the result, from their owners.
  for (int m = 0; receives && count > 0 && m < size_; ++m) {
    if (m == rank_) continue;
    Block slice = partition(count, size_, m);
    copy_bytes(b.recv + (first + slice.offset) * e, buffer(m, parity) + slice.offset * e, slice.count * e,
               streaming);
  }
  return {};
}

// One round of a broadcast: the root's data through its buffer, one barrier (the next round writes the
// other buffer, and the one after this one again only past the next round's barrier, which every rank
// enters after its copy-out here).
Result<void> SharedArea::broadcast_round(Exchange& ex, const Buffers& b, std::size_t first, std::size_t count,
                                         int root, int check) {
  std::size_t e = size_of(b.type);
  int parity = parity_;
  parity_ ^= 1;
  if (rank_ == root && count > 0) std::memcpy(buffer(root, parity), b.send + first * e, count * e);
  if (auto ok = barrier(ex); !ok) return ok;
  if (check >= 0)
    if (auto ok = agree(ex, check); !ok) return ok;
  if (rank_ != root && count > 0)
    copy_bytes(b.recv + first * e, buffer(root, parity), count * e,
               b.count * e * static_cast<std::size_t>(size_) >= kStreamingWorkingSet);
  return {};
}

int SharedArea::announce(const Exchange& ex) {
  int slot = static_cast<int>(calls_++ & 1);
  // Relaxed: the first barrier's release publishes it.
  word(control(rank_).call[slot]).store(ex.call_signature(), std::memory_order_relaxed);
  return slot;
}

Result<void> SharedArea::agree(Exchange& ex, int slot) const {
  for (int m = 0; m < size_; ++m) {
    if (m == rank_) continue;
    std::uint32_t theirs = word(control(m).call[slot]).load(std::memory_order_acquire);
    if (theirs == ex.call_signature()) continue;
    // A peer that found the mismatch first told us, then freed its area (no closing barrier after a
    // failure): its word may be gone already, and its notice, ahead of that in the queue, says why.
    if (auto ok = ex.poll(ex.world_rank(m)); !ok) return ok;
    return std::unexpected(ex.mismatched(ex.world_rank(m), theirs));
  }
  return {};
}

// At least one round, so that every call has a barrier and a check (an empty call moves no data).
template <typename Round>
Result<void> SharedArea::in_rounds(const Buffers& b, Round&& round) {
  std::size_t per_round = std::max<std::size_t>(1, round_ / size_of(b.type));
  std::size_t first = 0;
  do {
    if (auto ok = round(first, std::min(per_round, b.count - first)); !ok) return ok;
    first += per_round;
  } while (first < b.count);
  return {};
}

Result<void> SharedArea::allreduce(Exchange& ex, const Buffers& b) {
  int slot = announce(ex);
  return in_rounds(b, [&](std::size_t first, std::size_t count) {
    return reduce_round(ex, b, first, count, -1, first == 0 ? slot : -1);
  });
}

Result<void> SharedArea::reduce(Exchange& ex, const Buffers& b, int root) {
  int slot = announce(ex);
  return in_rounds(b, [&](std::size_t first, std::size_t count) {
    return reduce_round(ex, b, first, count, root, first == 0 ? slot : -1);
  });
}

Result<void> SharedArea::broadcast(Exchange& ex, const Buffers& b, int root) {
  std::size_t bytes = b.count * size_of(b.type);
  if (rank_ == root && b.send != b.recv && bytes > 0) std::memmove(b.recv, b.send, bytes);
  int slot = announce(ex);
  return in_rounds(b, [&](std::size_t first, std::size_t count) {
    return broadcast_round(ex, b, first, count, root, first == 0 ? slot : -1);
  });
}

}  // namespace rdmakit::coll::detail
