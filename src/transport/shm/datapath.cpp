// The initiator's data path: post() queues the chain and carries it out at once, in order, with no
// thread of the peer involved. Keys, bounds and rights are checked against the peer's registration table
// (its control segment, mapped read-only here) under a pin the peer's deregistration respects.
#include <poll.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "core/copy.hpp"
#include "core/rc_state.hpp"
#include "core/tsan.hpp"
#include "transport/shm/connection.hpp"

namespace rdmakit::shm {
namespace {

// Operations up to this size are carried out inside post(): their latency is the point. Larger ones are
// left to the progress thread (or a thread polling the completion queue), as a NIC's DMA engine would
// take them, so post() returns at once and a peer that dies mid-transfer fails what is left.
constexpr std::uint64_t kInlineMax = 64 << 10;
// Large WRITE/READ move in chunks: between chunks the peer's liveness is checked and, every
// kBytesPerRound, the connection is left so other connections and posters get their turn.
constexpr std::uint64_t kChunk = 1 << 20;
constexpr std::uint64_t kBytesPerRound = 8 << 20;

}  // namespace

// Under mutex_, after the RC prologue (Connection::post).
Result<std::uint64_t> ShmConnection::post_admitted(std::span<const WorkRequest> chain, std::uint64_t sequence,
                                                   std::unique_lock<std::mutex>&) {
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const WorkRequest& r = chain[i];
    // Every field is assigned (sge up to count; local() reads no further): the slot is not zeroed first.
    Pending& op = pending_.push_back_slot();
    op.id = rc().send_id(sequence + i);
    op.request = r;
    op.count = static_cast<std::uint32_t>(r.local.size());
    std::copy(r.local.begin(), r.local.end(), op.sge.begin());
    op.total = 0;
    for (const Segment& s : r.local) op.total += s.length;
    op.offset = 0;
    op.deadline = {};
    op.atomic_requested = false;
    op.request.local = {};
  }
  drain(Drainer::Poster);
  if (wants_progress_) context_->wake();
  return rc().send_id(sequence);
}

// Carries out pending operations from the head until one must wait. From post(), stops at the first
// large one; otherwise moves at most kBytesPerRound before returning. Returns whether anything moved.
// A large transfer is one thread's work at a time: a poller keeps its lease alive between chunks (a round
// outlasts the lease, and the progress thread woke when it ran out and took every other round while the
// poller spun beside it on the same core: 256 MiB WRITEs at a tenth of memcpy's speed), and the progress
// thread hands the rest to a poller that holds the lease.
bool ShmConnection::drain(Drainer who) {
  const bool from_post = who == Drainer::Poster;
  bool any = false;
  std::uint64_t budget = kBytesPerRound;
  wants_progress_ = false;
  while (!pending_.empty() && !rc().in_error()) {
    Pending& head = pending_.front();
    if (head.total > kInlineMax && (from_post || budget == 0)) {
      wants_progress_ = true;
      break;
    }
    if (head.total > kInlineMax) ring_if_owed();  // what is done is not held back by a long transfer
    Outcome outcome = execute(head);
    if (outcome.blocked) break;
    any = true;
    if (outcome.more) {
      budget -= std::min(budget, kChunk);
      unpin();  // an owner revoking the key waits no longer than one chunk
      if (peer_hung_up()) peer_gone_locked();
      if (who == Drainer::Poller) context_->note_polling();
      if (who == Drainer::ProgressThread && context_->leased()) break;
      continue;
    }
    const Pending& op = pending_.front();  // not copied: finish() needs three fields
    const std::uint64_t id = op.id;
    const Opcode opcode = op.request.opcode;
    const bool signaled = op.request.signaled;
    pending_.pop_front();
    finish(id, opcode, signaled, outcome);
  }
  unpin();
  peer_->ipc.sweep(*peer_);  // device allocations the peer revoked are closed here (cuda-ipc)
  settle_unsignaled();
  ring_if_owed();
  has_pending_.store(!pending_.empty() && !rc().in_error(), std::memory_order_release);
  return any;
}

// Between chunks of a large transfer: has the peer's end of the socket gone? (No system call per
// small operation; one per MiB moved.)
bool ShmConnection::peer_hung_up() {
  pollfd p{socket_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

ShmConnection::Outcome ShmConnection::execute(Pending& op) {
  switch (op.request.opcode) {
    case Opcode::Write:
    case Opcode::WriteImm:
      return do_write(op);
    case Opcode::Read:
      return do_read(op);
    case Opcode::CompareSwap:
    case Opcode::FetchAdd:
      return do_atomic(op);
    default:
      return do_send(op);
  }
}

Status ShmConnection::check_local(std::span<const Segment> local, bool write, std::uint64_t* total,
                                  std::uint32_t* device_mask, DeviceRef* refs) const {
  *total = 0;
  if (device_mask) *device_mask = 0;
  for (std::size_t i = 0; i < local.size(); ++i) {
    const DeviceRef* device = nullptr;
    if (Status st = context_->registry().check_local(local[i], write, &device); st != Status::Success)
      return st;
    if (device) {
      if (device_mask) *device_mask |= 1u << i;  // at most kMaxSge (16) segments
      if (refs) refs[i] = *device;
    }
    *total += local[i].length;
  }
  return Status::Success;
}

Status ShmConnection::transfer(const Pending& op, std::uint32_t device_mask, std::uint32_t key,
                               std::uint64_t addr, std::uint64_t length, bool write, bool streaming) {
  const DeviceRef& published = peer_->ctl().device[key & (kSlots - 1)];
  const bool remote_device = (published.flags & kDeviceMemory) != 0;
  if (device_mask == 0 && !remote_device)
    return write ? write_remote(*peer_, op.local(), op.offset, addr, length, streaming)
                 : read_remote(*peer_, op.local(), op.offset, addr, length, streaming);
  Pieces remote(1);
  if (remote_device) {
    DeviceRef ref;  // one copy of what the peer published: it is checked, then used
    std::memcpy(&ref, &published, sizeof(ref));
    if (Status st = resolve_device(*peer_, ref, key & (kSlots - 1), key, addr, length, &remote[0]);
        st != Status::Success)
      return st;
  } else {
    remote[0] = Piece{addr, length, false, nullptr};
  }
  return move_pieces(*peer_, pieces_of(op.local(), device_mask, op.offset, length), remote, write);
}

Status ShmConnection::send_device(const Pending& op, std::uint32_t device_mask, const RecvEntry& entry,
                                  std::uint32_t count, std::uint64_t taken, std::uint64_t length) {
  const Inbound::RecvDevice& published = out().recv_device[taken % kRingSlots];
  Pieces remote = pieces_of(std::span(entry.sge, count), entry.device_mask, 0, length);
  for (std::size_t i = 0, piece = 0; i < count && piece < remote.size(); ++i) {
    if (entry.sge[i].length == 0) continue;  // pieces_of() skipped it
    if (remote[piece].device) {
      DeviceRef ref;
      std::memcpy(&ref, &published.ref[i], sizeof(ref));
      // Slot and key 0: opened for a receive, kept until the view goes (no registration to watch).
      if (Status st =
              resolve_device(*peer_, ref, 0, 0, remote[piece].addr, remote[piece].length, &remote[piece]);
          st != Status::Success)
        return st;
    }
    ++piece;
  }
  return move_pieces(*peer_, pieces_of(op.local(), device_mask, 0, length), remote, true);
}

// Runs `access` with `key` pinned: the pin is published before the key is looked up (seq_cst on both
// sides), so an owner revoking the key either makes the lookup fail or waits for the access to end.
// The pin stays published until drain() ends (unpin()), so a chain of operations on one key pays the
// seq_cst store (a full fence, which also waits for the previous copy's stores to drain) once, not per
// operation. Every access still looks the key up after the pin was published: the lookup of a later
// operation is ordered after the same seq_cst store.
template <typename F>
Status ShmConnection::pinned(std::uint32_t key, std::uint64_t addr, std::uint64_t length, Access needed,
                             F&& access) {
  if (pinned_key_ != key) {
    out().pin.store(key, std::memory_order_seq_cst);
    pinned_key_ = key;
  }
  Status status = check_remote(peer_->ctl(), key, addr, length, needed);
  if (status != Status::Success) return status;
  if (!populated_ || populated_[key & (kSlots - 1)] != key) populate_once(key, needed != Access::RemoteRead);
  return access();
}

#ifndef MADV_POPULATE_READ  // Linux 5.14; older headers
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

// A registered region on an RDMA NIC is pinned and mapped when it is registered: no operation ever waits for
// a page. Our mapping of the peer's arena starts empty, so without this every first touch of a 4 KiB page
// of a peer's region took a page fault on the initiator's data path (write_bw of 4 KiB messages walking a
// 256 MiB working set: 0.85 GB/s, page faults 33 % of the samples, against 15 GB/s for a memcpy of the same
// pieces). So the first access to a key maps the region's existing pages (MADV_POPULATE_* over the runs
// mincore() reports resident: only our page table entries are made, and a hole of a sparse allocate()d
// region stays a hole until someone writes it). Regions above kPopulateLimit are left to fault in, to bound
// the first operation's delay and the page tables spent; a failure (an old kernel) leaves faulting as the
// fallback.
void ShmConnection::populate_once(std::uint32_t key, bool write) {
  constexpr std::uint64_t kPopulateLimit = 4ull << 30;
  if (!populated_) populated_ = std::make_unique<std::uint32_t[]>(kSlots);
  populated_[key & (kSlots - 1)] = key;
  const RegistrationSlot& slot = peer_->ctl().slot[key & (kSlots - 1)];
  const std::uint64_t addr = slot.addr.load(std::memory_order_relaxed);
  const std::uint64_t length = slot.length.load(std::memory_order_relaxed);
  if (length == 0 || length > kPopulateLimit) return;
  std::byte* mine = peer_->translate(addr, length, write);
  if (!mine) return;  // device memory, or memory reached through the kernel (process_vm_*)
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<std::uintptr_t>(mine) & ~(page - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(mine) + length;
  std::vector<unsigned char> resident((end - start + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(start), end - start, resident.data()) != 0) return;
  for (std::size_t first = 0; first < resident.size();) {
    if (!(resident[first] & 1)) {
      ++first;
      continue;
    }
    std::size_t last = first;
    while (last < resident.size() && (resident[last] & 1)) ++last;
    ::madvise(reinterpret_cast<void*>(start + first * page), (last - first) * page,
              write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
    first = last;
  }
}

// Ends the pin: the owner may revoke and reuse the memory from here on. (Streaming copies fenced their
// stores already; cached ones are ordered before this release store.)
void ShmConnection::unpin() {
  if (pinned_key_ == 0) return;
  tsan::release_to_peer();
  out().pin.store(0, std::memory_order_release);
  pinned_key_ = 0;
}

ShmConnection::Outcome ShmConnection::do_write(Pending& op) {
  std::uint64_t total;
  std::uint32_t device_mask;
  if (Status st = check_local(op.local(), false, &total, &device_mask); st != Status::Success)
    return {false, false, st};
  bool with_imm = op.request.opcode == Opcode::WriteImm;
  if (with_imm) {
    // Wait for a receive before writing anything: a WRITE-with-immediate that fails RNR wrote nothing.
    Outcome wait = wait_for_receive(op);
    if (wait.blocked || wait.status != Status::Success) return wait;
  }
  const RemoteAddress& remote = op.request.remote;
  // Keys, bounds and rights are checked for the whole range on every chunk: an error shows before any
  // byte moves, and a deregistration between chunks stops the rest.
  std::uint64_t chunk = with_imm ? total : std::min(total - op.offset, kChunk);
  Status st = pinned(remote.rkey, remote.addr, total, Access::RemoteWrite, [&] {
    return transfer(op, device_mask, remote.rkey, remote.addr + op.offset, chunk, true,
                    detail::streams(total));
  });
  if (st != Status::Success) return {false, false, st};
  op.offset += chunk;
  if (op.offset < total) return {false, true};
  if (with_imm) {
    bool closed;
    if (!receive_ready(&closed))
      return {false, false, Status::TransportRetryExceeded};  // the peer closed meanwhile
    produce(RecvDone{.id = 0,
                     .bytes = static_cast<std::uint32_t>(total),
                     .imm = op.request.imm,
                     .status = static_cast<std::uint8_t>(Status::Success),
                     .opcode = static_cast<std::uint8_t>(Opcode::RecvWriteImm),
                     .has_imm = 1});
  }
  return {false, false, Status::Success, static_cast<std::uint32_t>(total)};
}

ShmConnection::Outcome ShmConnection::do_read(Pending& op) {
  std::uint64_t total;
  std::uint32_t device_mask;
  if (Status st = check_local(op.local(), true, &total, &device_mask); st != Status::Success)
    return {false, false, st};
  const RemoteAddress& remote = op.request.remote;
  std::uint64_t chunk = std::min(total - op.offset, kChunk);
  Status st = pinned(remote.rkey, remote.addr, total, Access::RemoteRead, [&] {
    return transfer(op, device_mask, remote.rkey, remote.addr + op.offset, chunk, false,
                    detail::streams(total));
  });
  if (st != Status::Success) return {false, false, st};
  op.offset += chunk;
  if (op.offset < total) return {false, true};
  return {false, false, st, static_cast<std::uint32_t>(total)};
}

ShmConnection::Outcome ShmConnection::do_atomic(Pending& op) {
  std::uint64_t total;
  std::uint32_t device_mask;
  if (Status st = check_local(op.local(), true, &total, &device_mask); st != Status::Success)
    return {false, false, st};
  const RemoteAddress& remote = op.request.remote;
  if (remote.addr % 8 != 0) return {false, false, Status::RemoteInvalidRequest};
  auto* word = reinterpret_cast<std::uint64_t*>(peer_->translate(remote.addr, 8, true));
  if (!word) return do_atomic_by_owner(op, device_mask & 1);
  std::uint64_t old_value = 0;
  Status st = pinned(remote.rkey, remote.addr, 8, Access::RemoteAtomic, [&] {
    atomic_on(word, op.request.opcode, op.request.compare_add, op.request.swap, &old_value);
    return Status::Success;
  });
  if (st == Status::Success) st = store_result(op.sge[0], device_mask & 1, old_value);
  return {false, false, st, st == Status::Success ? 8u : 0u};
}

// Memory the owner registered but did not allocate() is not mapped here, and no system call does an
// atomic in another process: the owner's progress thread does it as a CPU atomic on its own memory.
ShmConnection::Outcome ShmConnection::do_atomic_by_owner(Pending& op, bool result_on_device) {
  AtomicRequest& request = out().atomic;
  if (!op.atomic_requested) {
    if (out().closed.load(std::memory_order_acquire)) return {false, false, Status::TransportRetryExceeded};
    request.rkey = op.request.remote.rkey;
    request.opcode = static_cast<std::uint64_t>(op.request.opcode);
    request.addr = op.request.remote.addr;
    request.compare_add = op.request.compare_add;
    request.swap = op.request.swap;
    tsan::release_to_peer();
    request.state.store(kAtomicRequested, std::memory_order_release);
    op.atomic_requested = true;
    op.deadline = Clock::now() + context_->config().timeout;
    peer_->ring(true);
    return {true};
  }
  if (request.state.load(std::memory_order_acquire) != kAtomicDone) {
    if (Clock::now() >= op.deadline) return {false, false, Status::TransportRetryExceeded};
    return {true};
  }
  tsan::acquire_from_peer();
  auto status = static_cast<Status>(request.status);
  std::uint64_t old_value = request.old_value;
  request.state.store(kAtomicIdle, std::memory_order_release);
  if (status == Status::Success) status = store_result(op.sge[0], result_on_device, old_value);
  return {false, false, status, status == Status::Success ? 8u : 0u};
}

ShmConnection::Outcome ShmConnection::do_send(Pending& op) {
  std::uint64_t total;
  std::uint32_t device_mask;
  if (Status st = check_local(op.local(), false, &total, &device_mask); st != Status::Success)
    return {false, false, st};
  Outcome wait = wait_for_receive(op);
  if (wait.blocked || wait.status != Status::Success) return wait;
  Inbound& target = out();
  bool closed;
  if (!receive_ready(&closed)) return {false, false, Status::TransportRetryExceeded};
  std::uint64_t taken = target.recv_taken.load(std::memory_order_relaxed);
  const RecvEntry& entry = target.recv[taken % kRingSlots];
  std::uint32_t count = std::min(entry.count, kMaxSge);
  std::uint64_t room = 0;
  for (std::uint32_t i = 0; i < count; ++i) room += entry.sge[i].length;
  RecvDone done{.id = entry.id,
                .bytes = static_cast<std::uint32_t>(total),
                .imm = op.request.imm,
                .status = static_cast<std::uint8_t>(Status::Success),
                .opcode = static_cast<std::uint8_t>(Opcode::Recv),
                .has_imm = static_cast<std::uint8_t>(op.request.with_imm ? 1 : 0)};
  Status mine = Status::Success;
  if (total > room) {  // verbs: the receiver sees a local length error, the sender an invalid request
    done.status = static_cast<std::uint8_t>(Status::LocalLength);
    done.bytes = 0;
    mine = Status::RemoteInvalidRequest;
  } else if (Status st = device_mask == 0 && entry.device_mask == 0
                             ? write_scattered(*peer_, op.local(), std::span(entry.sge, count), total)
                             : send_device(op, device_mask, entry, count, taken, total);
             st != Status::Success) {
    done.status =
        static_cast<std::uint8_t>(st == Status::TransportRetryExceeded ? st : Status::LocalProtection);
    done.bytes = 0;
    mine = st == Status::TransportRetryExceeded ? st : Status::RemoteOperation;
  }
  produce(done);
  return {false, false, mine, mine == Status::Success ? static_cast<std::uint32_t>(total) : 0u};
}

// A posted receive at the peer, or the receiver-not-ready wait: blocked until one is posted, failing
// after Config::rnr_timeout.
ShmConnection::Outcome ShmConnection::wait_for_receive(Pending& op) {
  bool closed;
  bool ready = receive_ready(&closed);
  out().pin.store(0, std::memory_order_release);  // receive_ready() replaced any pin (pinned_key_ is 0)
  if (closed) return {false, false, Status::TransportRetryExceeded};
  if (ready) return {false, false, Status::Success};
  auto now = Clock::now();
  if (op.deadline == Clock::time_point{}) op.deadline = now + context_->config().rnr_timeout;
  if (now >= op.deadline) return {false, false, Status::RnrRetryExceeded};
  return {true};
}

// Marks a delivery under way (the peer's close waits for it) and looks for a posted receive. Leaves the
// delivering pin set; produce() or the caller clears it.
bool ShmConnection::receive_ready(bool* closed) {
  Inbound& target = out();
  unpin();  // a WRITE's pin before it ends: the delivering pin takes the word
  target.pin.store(kDeliveringPin, std::memory_order_seq_cst);
  *closed = target.closed.load(std::memory_order_seq_cst) != 0;
  if (*closed) {
    target.pin.store(0, std::memory_order_release);
    return false;
  }
  bool posted =
      target.recv_posted.load(std::memory_order_acquire) != target.recv_taken.load(std::memory_order_relaxed);
  tsan::acquire_from_peer();
  return posted;
}

// Consumes the receive at the head of the peer's ring with `done`, publishes it, wakes the peer.
void ShmConnection::produce(const RecvDone& done) {
  Inbound& target = out();
  std::uint64_t taken = target.recv_taken.load(std::memory_order_relaxed);
  std::uint64_t produced = target.produced.load(std::memory_order_relaxed);
  RecvDone filled = done;
  filled.id = target.recv[taken % kRingSlots].id;
  target.done[produced % kRingSlots] = filled;
  tsan::release_to_peer();
  target.recv_taken.store(taken + 1, std::memory_order_release);
  target.produced.store(produced + 1, std::memory_order_release);
  target.pin.store(0, std::memory_order_release);
  doorbell_owed_ = true;  // drain() rings once for the whole chain (a seq_cst fence per ring)
}

// One doorbell for every receive completion produced since the last: a chain of SENDs wakes the peer once.
void ShmConnection::ring_if_owed() {
  if (!doorbell_owed_) return;
  doorbell_owed_ = false;
  peer_->ring();
}

}  // namespace rdmakit::shm
