// The fake CUDA runtime's and driver's shared state (internal to the fake library; tests use
// fake_cudart.hpp). One mutex guards everything: the fake is a test double, not a fast path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "fake_cudart/fake_cudart.hpp"

namespace fake_cudart {

// cudaError_t and CUresult values (driver_types.h, cuda.h of CUDA 13; the fake does not include them).
enum Code : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kMemoryAllocation = 2,
  kInvalidMemcpyDirection = 21,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kDeviceUninitialized =
      201,  // cudaErrorDeviceUninitialized, CUDA_ERROR_INVALID_CONTEXT: "invalid device context"
  kMapBufferObjectFailed = 205,
  kInvalidResourceHandle = 400,
  kNotFound = 500,  // CUDA_ERROR_NOT_FOUND (driver)
  kNotReady = 600,
  kHostMemoryAlreadyRegistered = 712,
  kHostMemoryNotRegistered = 713,
  kNotSupported = 801,
};

enum class Kind { Device, Ipc, Managed };

// One device allocation: `base` is what the application sees (PROT_NONE for Device and Ipc, so a CPU
// access faults as on a GPU); `shadow` is the fake's own read-write view of the same pages.
struct Allocation {
  std::uintptr_t base;
  std::size_t size;    // as requested: copies must stay inside it
  std::size_t mapped;  // rounded up to pages: the memfd's size
  unsigned char* shadow;
  int fd;  // the memfd (-1 for managed memory)
  int device;
  Kind kind;
  std::uint64_t id;         // random, names the allocation in IPC handles and the memfd's name
  std::uint64_t buffer_id;  // CU_POINTER_ATTRIBUTE_BUFFER_ID: process-wide unique
  int ipc_pid = 0;          // Ipc: the exporting process and its allocation id (the cache key)
  int ipc_refs = 0;
};

struct HostRange {
  std::uintptr_t begin, end;
  bool owned;  // cudaMallocHost'ed: cudaFreeHost unmaps it
  int device;
  std::uint64_t buffer_id;
};

struct Stream;

// A queued copy, or (wait set) a cudaStreamWaitEvent: the queue runs `wait` up to `until` first.
struct Copy {
  void* dst;  // already translated to shadows
  const void* src;
  std::size_t size;
  Stream* wait = nullptr;
  std::uint64_t until = 0;
};

struct Stream {
  int device;
  bool blocking;  // without cudaStreamNonBlocking: the legacy default stream waits for it
  std::deque<Copy> queued;
  std::uint64_t enqueued = 0;   // copies ever queued
  std::uint64_t completed = 0;  // ... and run (or dropped)
};

struct Event {
  Stream* stream = nullptr;  // null: never recorded, or recorded on a finished/destroyed stream
  std::uint64_t position = 0;
};

struct Injected {
  int skip;
  int error;
};

struct State {
  std::mutex mutex;
  FakeCudartStats stats{.devices = 2};
  std::map<std::uintptr_t, Allocation> allocations;  // by base
  std::map<std::uintptr_t, HostRange> registered;    // by begin
  std::set<Stream*> streams;
  std::set<Event*> events;
  std::map<std::string, Injected> failures;
  std::uintptr_t next_hint = 0x5e0000000000;  // device addresses, recognisable in a debugger
  std::uint64_t next_buffer_id = 1;
  bool dmabuf_supported = true;
};

State& state();
int& current_device();  // thread-local, as the runtime's current device

// An injected failure of `function`, if one is due (0 otherwise). Caller holds the mutex.
int injected(const char* function);

// The allocation that holds [p, p + size) entirely, or null. `overlaps` is set when p lies inside an
// allocation but the range runs past its end.
Allocation* find_allocation(const void* p, std::size_t size, bool* overlaps = nullptr);
HostRange* find_registered(const void* p, std::size_t size);
// The fake's read-write address for device address p inside `a`.
inline unsigned char* shadow_of(const Allocation& a, const void* p) {
  return a.shadow + (reinterpret_cast<std::uintptr_t>(p) - a.base);
}

// Maps `fd` (of `mapped` bytes) twice: PROT_NONE at a recognisable address and read-write for the fake.
// Returns kSuccess or kMemoryAllocation; fills a.base, a.shadow.
int map_device(Allocation& a);
void unmap(Allocation& a);

// Runs queued copies: of one stream up to `position`, or of every stream (what the runtime's implicit
// synchronizations do: cudaFree, cudaDeviceSynchronize).
void run_until(Stream& s, std::uint64_t position);
void run_all();

std::size_t page_size();

}  // namespace fake_cudart
