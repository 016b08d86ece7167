// The peer as the initiator sees it: its control segment (read-only: its registration table and doorbell
// flag), its allocate() arenas (the remote-writable one mapped read-write, the RemoteRead-only one
// read-only) and its pid. Moving bytes to and from its memory needs
// none of its threads: through the shared mapping when the range lies in its arena, otherwise by
// cross-memory attach (process_vm_writev / process_vm_readv).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include "rdmakit/completion.hpp"
#include "rdmakit/memory.hpp"
#include "transport/shm/device_path.hpp"
#include "transport/shm/fd.hpp"
#include "transport/shm/layout.hpp"

namespace rdmakit::shm {

// Our mapping of one of the peer's arenas.
struct ArenaView {
  Mapping mapping;
  std::uint64_t base = 0;  // the arena's address in the peer

  std::byte* translate(std::uint64_t addr, std::uint64_t length) const noexcept;
};

struct PeerView {
  pid_t pid = 0;
  std::uint64_t epoch = 0;
  std::uint64_t id = 0;
  std::string name;
  Mapping control;       // PROT_READ (the peer sealed it: it cannot be mapped writable)
  ArenaView writable;    // PROT_READ | PROT_WRITE: the peer's RemoteWrite / RemoteAtomic allocations
  ArenaView read_only;   // PROT_READ: the peer's RemoteRead-only allocations
  UniqueFd doorbell;     // the peer's eventfd
  mutable IpcCache ipc;  // the peer's device allocations opened here (cuda-ipc), closed with the view

  const ControlSegment& ctl() const noexcept { return *control.as<const ControlSegment>(); }
  // Our address of the peer's [addr, addr+length) when it lies in an arena we may access that way (only the
  // writable one when `write`), else nullptr: the access then goes through cross-memory attach or the owner.
  std::byte* translate(std::uint64_t addr, std::uint64_t length, bool write) const noexcept;
  // Wakes the peer's progress thread if it sleeps. `always` also when it looks awake (for requests
  // only that thread can serve).
  void ring(bool always = false) const noexcept;
};

// WRITE: `length` bytes of the local segments, gathered from byte `skip` on, to [addr, addr+length) at the
// peer. `streaming`: with non-temporal stores where the peer's memory is mapped (core/copy.hpp; the caller
// decides by the whole operation's size, not this chunk's).
Status write_remote(const PeerView& peer, std::span<const Segment> local, std::uint64_t skip,
                    std::uint64_t addr, std::uint64_t length, bool streaming = false);
// READ: [addr, addr+length) at the peer, scattered into the local segments from byte `skip` on.
Status read_remote(const PeerView& peer, std::span<const Segment> local, std::uint64_t skip,
                   std::uint64_t addr, std::uint64_t length, bool streaming = false);
// SEND: `length` bytes of the local segments into the peer's receive segments.
Status write_scattered(const PeerView& peer, std::span<const Segment> local, std::span<const Segment> remote,
                       std::uint64_t length);
// `length` bytes between [local, local+length) here and [addr, addr+length) in the peer, by cross-memory
// attach (`write`: to the peer).
Status cross_memory_range(const PeerView& peer, void* local, std::uint64_t addr, std::uint64_t length,
                          bool write);
// A CPU atomic on an 8-byte aligned word; the old value goes to *old_value.
void atomic_on(std::uint64_t* word, Opcode opcode, std::uint64_t compare_add, std::uint64_t swap,
               std::uint64_t* old_value) noexcept;

}  // namespace rdmakit::shm
