// The bytes that processes share. Plain data only, the same layout in every process that maps it: the
// control segment (one per context: who it is, its registration table, its doorbell flag) and the link
// segment (one per connection: posted receives, receive completions and atomic requests, per direction).
// Every field another process writes is a lock-free std::atomic, so concurrent access is defined.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/clock.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::shm {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared atomics must be address-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "shared atomics must be address-free");

constexpr std::uint32_t kVersion = 4;                           // 4: device memory (DeviceSlot, RecvDevice)
constexpr std::uint64_t kControlMagic = 0x4c52544353444b52ull;  // "RKDSCTRL"
constexpr std::uint64_t kLinkMagic = 0x4b4e494c53444b52ull;     // "RKDSLINK"

// Registration slots per context. A key is (generation << kSlotBits) | slot, so the initiator finds the
// slot from the key alone; generations make a key of a deregistered region never valid again.
constexpr std::uint32_t kSlotBits = 14;
constexpr std::uint32_t kSlots = 1u << kSlotBits;
// The pin value of an initiator delivering a SEND or WRITE-with-immediate (never a valid key).
constexpr std::uint32_t kDeliveringPin = 0xffffffffu;

struct RegistrationSlot {
  std::atomic<std::uint32_t> key;     // 0: free or revoked. Published last, revoked first.
  std::atomic<std::uint32_t> access;  // Access bits
  std::atomic<std::uint64_t> addr;    // in the owner's address space
  std::atomic<std::uint64_t> length;
  std::uint64_t reserved;
};

// CUDA device memory behind a registration slot (path cuda-ipc): the owner's allocation that holds the region
// and, only when the region grants a remote right, the CUDA IPC handle of that whole allocation (IPC exports
// whole allocations; caching allocators register interior ranges). Written before the slot's key is
// published and left alone while it is, so an initiator that matched the key under its pin reads it stably.
constexpr std::uint32_t kDeviceMemory = 1;  // DeviceSlot::flags: the region is device memory
constexpr std::uint32_t kDeviceHandle = 2;  // DeviceSlot::flags: `handle` is valid
struct DeviceRef {
  std::uint64_t base;  // the allocation, in the owner's address space
  std::uint64_t size;
  std::uint32_t flags;  // kDeviceMemory | kDeviceHandle
  std::int32_t device;
  char handle[64];  // cudaIpcMemHandle_t
};
using DeviceSlot = DeviceRef;

struct ControlSegment {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t slots;
  std::int64_t pid;
  std::uint64_t epoch;
  // Set while the owner's progress thread sleeps on its doorbell: peers write the eventfd only then,
  // so a busy owner costs them no system call.
  alignas(64) std::atomic<std::uint32_t> sleeping;
  // The polling lease: until this time (steady_ns) a thread of the owner polls its completion queues
  // and so makes progress itself. Peers do not ring while it runs: a wake-up would only put the progress
  // thread on a core the poller needs. 0: nobody polls.
  std::atomic<std::int64_t> polled_until;
  alignas(64) RegistrationSlot slot[kSlots];
  alignas(64) DeviceSlot device[kSlots];  // by slot, beside `slot` (0 flags: host memory)
};

// Whether whoever just published something for the owner of `control` must write its doorbell. The caller
// has issued a seq_cst fence after publishing (pairs with the sleeper's fence, and with the fence of a
// poller that ends its lease).
inline bool needs_doorbell(const ControlSegment& control) noexcept {
  if (control.sleeping.load(std::memory_order_relaxed) == 0) return false;
  return control.polled_until.load(std::memory_order_relaxed) <= steady_ns();
}

// Receives and atomics: what one connection's direction can hold.
constexpr std::uint32_t kMaxSge = 16;
constexpr std::uint32_t kRingSlots = 1024;

struct RecvEntry {
  std::uint64_t id;
  std::uint32_t count;
  std::uint32_t device_mask;  // bit i: sge[i] is device memory, described by RecvDevice::ref[i]
  Segment sge[kMaxSge];       // in the receiver's address space
};

struct RecvDone {
  std::uint64_t id;
  std::uint32_t bytes;
  std::uint32_t imm;
  std::uint8_t status;  // Status
  std::uint8_t opcode;  // Opcode::Recv or Opcode::RecvWriteImm
  std::uint8_t has_imm;
  std::uint8_t reserved[5];
};

// An atomic on memory the owner has not shared by mapping (memory from register_memory, not allocate):
// the owner's progress thread carries it out as a CPU atomic in its own address space.
enum AtomicState : std::uint32_t { kAtomicIdle = 0, kAtomicRequested = 1, kAtomicDone = 2 };
struct AtomicRequest {
  std::atomic<std::uint32_t> state;
  std::uint32_t rkey;
  std::uint64_t opcode;  // Opcode
  std::uint64_t addr;
  std::uint64_t compare_add;
  std::uint64_t swap;
  std::uint64_t old_value;
  std::uint64_t status;  // Status
};

// Traffic into one side R (the receiver / target) from the other side S (the initiator).
struct Inbound {
  alignas(64) std::atomic<std::uint64_t> recv_posted;  // written by R
  std::atomic<std::uint64_t> reaped;                   // written by R: completions taken
  std::atomic<std::uint32_t> closed;                   // written by R: accepts nothing more
  alignas(64) std::atomic<std::uint64_t> recv_taken;   // written by S
  std::atomic<std::uint64_t> produced;                 // written by S: completions written
  // Written by S: the key S is accessing in R's memory, kDeliveringPin, or 0. R's deregistration waits
  // until no live initiator holds the key it revokes; R's close waits for a delivery to end.
  alignas(64) std::atomic<std::uint32_t> pin;
  alignas(64) AtomicRequest atomic;
  RecvEntry recv[kRingSlots];
  RecvDone done[kRingSlots];
  // Written by R beside recv[]: the allocations of receive segments in device memory, so that S can open
  // them (CUDA IPC) and land a SEND there. Posting the receive is R's grant to S, as for host segments.
  struct RecvDevice {
    DeviceRef ref[kMaxSge];
  } recv_device[kRingSlots];
};

struct LinkSegment {
  std::uint64_t magic;
  std::uint32_t version;
  Inbound into[2];  // [0]: into the connecting side, [1]: into the accepting side
};

}  // namespace rdmakit::shm
