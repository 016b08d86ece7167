// The fake runtime's devices and memory: cudaMalloc (a memfd behind a PROT_NONE device address),
// managed and pinned host memory, pointer attributes and error strings. Signatures and codes as
// cuda_runtime_api.h / driver_types.h of CUDA 13 document them.
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>

#include "fake_cudart/state.hpp"

using namespace fake_cudart;

namespace {

constexpr int kInvalidDeviceId = -2;  // cudaInvalidDeviceId: the device of an unregistered pointer

std::uint64_t random_id() {
  std::uint64_t id = 0;
  while (::getrandom(&id, sizeof id, 0) != sizeof id || id == 0) {
  }
  return id;
}

bool round_to_pages(std::size_t size, std::size_t* mapped) {
  std::size_t page = page_size();
  if (size > SIZE_MAX - page) return false;
  *mapped = (size + page - 1) / page * page;
  return true;
}

// The memfd's name carries the allocation's id: an IPC opener checks it, so a handle whose fd number
// was reused by another file (or another allocation) does not open.
int create_memfd(const Allocation& a) {
  char name[64];
  std::snprintf(name, sizeof name, "fake-cuda-device-%016llx", static_cast<unsigned long long>(a.id));
  int fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(a.mapped)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when [begin, end) overlaps a registered host range.
bool overlaps_registered(std::uintptr_t begin, std::uintptr_t end) {
  auto& all = state().registered;
  auto it = all.lower_bound(end);
  if (it == all.begin()) return false;
  --it;
  return it->second.end > begin;
}

bool overlaps_device(std::uintptr_t begin, std::uintptr_t end) {
  auto& all = state().allocations;
  auto it = all.lower_bound(end);
  if (it == all.begin()) return false;
  --it;
  return it->second.base + it->second.mapped > begin;
}

}  // namespace

extern "C" {

struct cudaPointerAttributes {
  int type;  // cudaMemoryType: 0 unregistered, 1 host, 2 device, 3 managed
  int device;
  void* devicePointer;
  void* hostPointer;
  long reserved[8];
};

const char* cudaGetErrorString(int error) {
  switch (error) {
    case kSuccess:
      return "no error";
    case kInvalidValue:
      return "invalid argument";
    case kMemoryAllocation:
      return "out of memory";
    case kInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case kNoDevice:
      return "no CUDA-capable device is detected";
    case kInvalidDevice:
      return "invalid device ordinal";
    case kDeviceUninitialized:
      return "invalid device context";
    case kMapBufferObjectFailed:
      return "mapping of buffer object failed";
    case kInvalidResourceHandle:
      return "invalid resource handle";
    case kNotReady:
      return "device not ready";
    case 700:
      return "an illegal memory access was encountered";
    case kHostMemoryAlreadyRegistered:
      return "part or all of the requested memory range is already mapped";
    case kHostMemoryNotRegistered:
      return "pointer does not correspond to a registered memory region";
    case kNotSupported:
      return "operation not supported";
  }
  return "unrecognized error code";
}

int cudaGetDeviceCount(int* count) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!count) return kInvalidValue;
  *count = state().stats.devices;
  return state().stats.devices == 0 ? kNoDevice : kSuccess;
}

int cudaGetDevice(int* device) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!device) return kInvalidValue;
  *device = current_device();
  return kSuccess;
}

int cudaSetDevice(int device) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (device < 0 || device >= state().stats.devices) return kInvalidDevice;
  current_device() = device;
  return kSuccess;
}

int cudaMalloc(void** pointer, std::size_t size) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!pointer) return kInvalidValue;
  if (size == 0) {  // as the runtime: success and a null pointer
    *pointer = nullptr;
    return kSuccess;
  }
  if (state().stats.devices == 0) return kNoDevice;
  Allocation a{.size = size, .device = current_device(), .kind = Kind::Device, .id = random_id()};
  if (!round_to_pages(size, &a.mapped)) return kMemoryAllocation;
  a.fd = create_memfd(a);
  if (a.fd < 0) return kMemoryAllocation;
  if (int e = map_device(a)) {
    ::close(a.fd);
    return e;
  }
  a.buffer_id = state().next_buffer_id++;
  state().allocations.emplace(a.base, a);
  ++state().stats.device_allocations;
  *pointer = reinterpret_cast<void*>(a.base);
  return kSuccess;
}

// Managed memory is host-accessible: one read-write mapping, which is its own shadow.
int cudaMallocManaged(void** pointer, std::size_t size, unsigned flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  // cudaMemAttachGlobal (1) or cudaMemAttachHost (2); a size of 0 is cudaErrorInvalidValue here.
  if (!pointer || size == 0 || (flags != 1 && flags != 2)) return kInvalidValue;
  if (state().stats.devices == 0) return kNoDevice;
  Allocation a{.size = size, .fd = -1, .device = current_device(), .kind = Kind::Managed, .id = random_id()};
  if (!round_to_pages(size, &a.mapped)) return kMemoryAllocation;
  void* p = ::mmap(nullptr, a.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return kMemoryAllocation;
  a.base = reinterpret_cast<std::uintptr_t>(p);
  a.shadow = static_cast<unsigned char*>(p);
  a.buffer_id = state().next_buffer_id++;
  state().allocations.emplace(a.base, a);
  ++state().stats.device_allocations;
  *pointer = p;
  return kSuccess;
}

int cudaFree(void* pointer) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!pointer) return kSuccess;
  auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  // Only a base cudaMalloc returned; IPC mappings close with cudaIpcCloseMemHandle.
  if (it == state().allocations.end() || it->second.kind == Kind::Ipc) return kInvalidValue;
  run_all();  // cudaFree synchronizes the device: queued copies into the allocation run first
  unmap(it->second);
  state().allocations.erase(it);
  --state().stats.device_allocations;
  return kSuccess;
}

int cudaMallocHost(void** pointer, std::size_t size) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!pointer) return kInvalidValue;
  if (size == 0) {
    *pointer = nullptr;
    return kSuccess;
  }
  std::size_t mapped = 0;
  if (!round_to_pages(size, &mapped)) return kMemoryAllocation;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return kMemoryAllocation;
  auto begin = reinterpret_cast<std::uintptr_t>(p);
  state().registered[begin] =
      HostRange{begin, begin + size, true, current_device(), state().next_buffer_id++};
  ++state().stats.registered_ranges;
  *pointer = p;
  return kSuccess;
}

int cudaFreeHost(void* pointer) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!pointer) return kSuccess;
  auto it = state().registered.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == state().registered.end() || !it->second.owned) return kInvalidValue;
  run_all();  // as cudaFree: no queued copy may still read or write it
  std::size_t mapped = 0;
  round_to_pages(it->second.end - it->second.begin, &mapped);
  ::munmap(pointer, mapped);
  state().registered.erase(it);
  --state().stats.registered_ranges;
  return kSuccess;
}

int cudaHostRegister(void* pointer, std::size_t size, unsigned flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  // Flags: Portable 1, Mapped 2, IoMemory 4, ReadOnly 8.
  if (!pointer || size == 0 || size > UINTPTR_MAX - begin || (flags & ~0xfu)) return kInvalidValue;
  if (overlaps_device(begin, begin + size)) return kInvalidValue;
  if (overlaps_registered(begin, begin + size)) return kHostMemoryAlreadyRegistered;
  state().registered[begin] =
      HostRange{begin, begin + size, false, current_device(), state().next_buffer_id++};
  ++state().stats.registered_ranges;
  return kSuccess;
}

int cudaHostUnregister(void* pointer) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  auto it = state().registered.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == state().registered.end() || it->second.owned) return kHostMemoryNotRegistered;
  state().registered.erase(it);
  --state().stats.registered_ranges;
  return kSuccess;
}

// As the runtime since CUDA 11: an unregistered host pointer is cudaSuccess with type 0.
int cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!attributes) return kInvalidValue;
  *attributes = cudaPointerAttributes{.device = kInvalidDeviceId};
  void* p = const_cast<void*>(pointer);
  if (const Allocation* a = find_allocation(pointer, 0)) {
    bool managed = a->kind == Kind::Managed;
    *attributes = cudaPointerAttributes{.type = managed ? 3 : 2,
                                        .device = a->device,
                                        .devicePointer = p,
                                        .hostPointer = managed ? p : nullptr};
  } else if (const HostRange* h = find_registered(pointer, 0)) {
    *attributes = cudaPointerAttributes{.type = 1, .device = h->device, .devicePointer = p, .hostPointer = p};
  }
  return kSuccess;
}

}  // extern "C"
