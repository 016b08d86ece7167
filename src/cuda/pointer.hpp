// What a pointer is: host or device memory, which device, and the allocation it lies in. Registration asks
// this once per region (Context::register_memory with a MemoryKind), so a transport knows the path its bytes
// must take before any operation runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rdmakit/error.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::detail::cuda {

struct PointerInfo {
  MemoryKind kind = MemoryKind::Host;  // Host or Cuda, never Auto
  int device = -1;                     // Cuda: the device ordinal
  bool managed = false;                // managed (unified) memory: the CPU may touch it, so it counts as Host
  std::uint64_t base = 0;              // Cuda: the allocation the range lies in (caching allocators hand out
  std::uint64_t allocation_size = 0;   //   interior pointers; IPC and dmabuf export whole allocations)
};

// Resolves the kind the caller gave for [data, data+size):
// - Host: host memory; CUDA is not consulted.
// - Cuda: CUDA must load and say device memory covering the whole range; else an error (Unavailable without
//   a usable runtime or driver, InvalidArgument for memory that is not device memory or a range that runs
//   past its allocation), each naming `who` and what was found. Never host memory by default.
// - Auto: Cuda when a CUDA driver is already loaded in this process and says device memory; Host otherwise.
//   Device memory cannot exist in a process that has not loaded the driver, so a process that never uses
//   CUDA never loads it here.
Result<PointerInfo> classify(const void* data, std::size_t size, MemoryKind requested, std::string_view who);

}  // namespace rdmakit::detail::cuda
