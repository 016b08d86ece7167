// Registration in shared memory. The owner writes its table into its control segment; initiators read
// the peer's table from their read-only mapping of it, so keys, bounds and rights are checked at the
// initiator with no thread of the owner involved (as an RDMA NIC checks them without the host CPU).
// The owner keeps a second copy in its private memory: whatever the owner itself does (its own local
// checks, an atomic it serves for a peer) is checked against that copy only, never against a page another
// process has mapped.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/key_source.hpp"
#include "rdmakit/completion.hpp"
#include "rdmakit/memory.hpp"
#include "transport/shm/layout.hpp"

namespace rdmakit::shm {

// The owner's side: hands out slots and keys. A region has two keys, both (random << kSlotBits) | slot
// from one KeySource (core/key_source.hpp, as tcp's): random, never issued twice in the registry's life,
// lkey != rkey. Only the rkey is published in the shared table; the lkey lives in the private copy alone,
// so an lkey is never valid as an rkey, and a peer holding one key learns nothing of any other.
class Registry {
 public:
  struct Keys {
    std::uint32_t lkey;
    std::uint32_t rkey;
  };

  explicit Registry(ControlSegment* control);

  // Publishes [addr, addr+length) with `access`; Errc::ResourceExhausted when every slot is taken.
  // `device`: the region is device memory in that allocation. Its IPC handle reaches the shared table only
  // when `access` grants a remote right (as the arenas: a peer sees nothing of local-only memory).
  Result<Keys> add(std::uint64_t addr, std::uint64_t length, Access access,
                   const DeviceRef* device = nullptr);
  // Makes `rkey` (and its region's lkey) invalid at once for every initiator that looks it up from now on.
  // Accesses that already pinned it are waited for by the caller (the context knows the connections),
  // then release().
  void revoke(std::uint32_t rkey) noexcept;
  void release(std::uint32_t rkey);
  // Slots in use: regions registered now (revoked ones until released).
  std::size_t size() const;

  // Both checks read the private table. A local segment of this process: key valid, inside its region,
  // LocalWrite when `write`.
  // `device`, when given, is set to the region's device entry (null for host memory).
  Status check_local(const Segment& segment, bool write, const DeviceRef** device = nullptr) const noexcept;
  // An access that this process carries out for a peer (atomics on unmapped memory).
  Status check_own(std::uint32_t key, std::uint64_t addr, std::uint64_t length, Access needed) const noexcept;
  // After check_own succeeded for `key`: whether its region is device memory.
  bool is_device(std::uint32_t key) const noexcept;

 private:
  ControlSegment* control_;
  std::unique_ptr<RegistrationSlot[]> private_;  // the owner's own copy (key: the rkey): the authority
  std::unique_ptr<std::atomic<std::uint32_t>[]> lkeys_;  // by slot; 0: free or revoked
  std::unique_ptr<DeviceRef[]> devices_;                 // by slot: the private copy (handle always kept)
  mutable std::mutex mutex_;
  std::vector<std::uint32_t> free_slots_;
  KeySource keys_;
};

// The initiator's side: checks an access against the peer's table. The caller must have stored `key`
// into its pin word (seq_cst) before calling, so that a revocation either is seen here or waits for it.
Status check_remote(const ControlSegment& peer, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                    Access needed) noexcept;

// Overflow-safe "[addr, addr+length) inside [base, base+size)".
constexpr bool covers(std::uint64_t base, std::uint64_t size, std::uint64_t addr,
                      std::uint64_t length) noexcept {
  return addr >= base && addr - base <= size && length <= size - (addr - base);
}

}  // namespace rdmakit::shm
