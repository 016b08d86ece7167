// A fake CUDA runtime for the checkpoint engine's unit tests: the symbols the engine loads with dlopen
// (src/ckpt/cuda_runtime.hpp), with the documented signatures and error codes, over host memory.
//
// It is strict where the real runtime is and where the engine's correctness depends on it: copies are
// asynchronous (queued, run only by cudaStreamSynchronize, so an engine that forgets to wait reads stale
// bytes), device memory is only what cudaMalloc returned, and it counts copies on the default stream or
// from unpinned host memory (legal in CUDA, but the engine promises neither).
#include "fake_cudart/fake_cudart.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using cudaError_t = int;
constexpr cudaError_t kSuccess = 0, kInvalidValue = 1, kMemoryAllocation = 2, kNoDevice = 100,
                      kInvalidDevice = 101;

struct Copy {
  void* dst;
  const void* src;
  std::size_t size;
};
struct Stream {
  int device;
  std::vector<Copy> queued;
};
struct Range {
  std::uintptr_t begin, end;
  int device;
};

std::mutex g_mutex;
FakeCudartStats g_stats{.devices = 2};
std::map<std::uintptr_t, Range> g_device_memory;  // by begin
std::map<std::uintptr_t, Range> g_registered;     // by begin
struct Injected {
  int skip;
  int error;
};
std::map<std::string, Injected> g_failures;
thread_local int t_device = 0;

// An injected failure of `function`, if one is due.
cudaError_t injected(const char* function) {
  auto it = g_failures.find(function);
  if (it == g_failures.end()) return kSuccess;
  if (it->second.skip-- > 0) return kSuccess;
  cudaError_t error = it->second.error;
  g_failures.erase(it);
  return error;
}

const Range* find(const std::map<std::uintptr_t, Range>& ranges, const void* p, std::size_t size) {
  auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = ranges.upper_bound(at);
  if (it == ranges.begin()) return nullptr;
  --it;
  return at >= it->second.begin && at + size <= it->second.end ? &it->second : nullptr;
}

}  // namespace

extern "C" {

struct cudaPointerAttributes {
  int type;  // 0 unregistered, 1 host, 2 device, 3 managed
  int device;
  void* devicePointer;
  void* hostPointer;
  long reserved[8];
};

void fake_cudart_reset(int devices) {
  std::lock_guard lock(g_mutex);
  // Device memory stays: its owners free it.
  g_stats = FakeCudartStats{.devices = devices, .device_allocations = g_stats.device_allocations};
  g_failures.clear();
  g_registered.clear();
}

void fake_cudart_stats(FakeCudartStats* out) {
  std::lock_guard lock(g_mutex);
  *out = g_stats;
}

void fake_cudart_fail(const char* function, int skip, int error) {
  std::lock_guard lock(g_mutex);
  g_failures[function] = Injected{skip, error};
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case kSuccess:
      return "no error";
    case kInvalidValue:
      return "invalid argument";
    case kMemoryAllocation:
      return "out of memory";
    case kNoDevice:
      return "no CUDA-capable device is detected";
    case kInvalidDevice:
      return "invalid device ordinal";
    case 700:
      return "an illegal memory access was encountered";
  }
  return "unrecognized error code";
}

cudaError_t cudaGetDeviceCount(int* count) {
  std::lock_guard lock(g_mutex);
  if (auto e = injected("cudaGetDeviceCount")) return e;
  *count = g_stats.devices;
  return g_stats.devices == 0 ? kNoDevice : kSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return kSuccess;
}

cudaError_t cudaSetDevice(int device) {
  std::lock_guard lock(g_mutex);
  if (device < 0 || device >= g_stats.devices) return kInvalidDevice;
  t_device = device;
  return kSuccess;
}

cudaError_t cudaMalloc(void** pointer, std::size_t size) {
  std::lock_guard lock(g_mutex);
  void* memory = std::malloc(size ? size : 1);
  if (!memory) return kMemoryAllocation;
  auto begin = reinterpret_cast<std::uintptr_t>(memory);
  g_device_memory[begin] = Range{begin, begin + size, t_device};
  ++g_stats.device_allocations;
  *pointer = memory;
  return kSuccess;
}

cudaError_t cudaFree(void* pointer) {
  std::lock_guard lock(g_mutex);
  if (!g_device_memory.erase(reinterpret_cast<std::uintptr_t>(pointer))) return kInvalidValue;
  --g_stats.device_allocations;
  std::free(pointer);
  return kSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  std::lock_guard lock(g_mutex);
  *attributes = cudaPointerAttributes{};
  if (const Range* r = find(g_device_memory, pointer, 0)) {
    attributes->type = 2;
    attributes->device = r->device;
    attributes->devicePointer = const_cast<void*>(pointer);
  } else if (find(g_registered, pointer, 0)) {
    attributes->type = 1;
    attributes->hostPointer = const_cast<void*>(pointer);
  }
  return kSuccess;
}

cudaError_t cudaStreamCreateWithFlags(void** stream, unsigned flags) {
  std::lock_guard lock(g_mutex);
  if (auto e = injected("cudaStreamCreateWithFlags")) return e;
  *stream = new Stream{t_device, {}};
  ++g_stats.streams_alive;
  if (!(flags & 1)) ++g_stats.streams_blocking;
  return kSuccess;
}

cudaError_t cudaStreamDestroy(void* stream) {
  std::lock_guard lock(g_mutex);
  auto* s = static_cast<Stream*>(stream);
  if (!s) return kInvalidValue;
  g_stats.copies_dropped += static_cast<long>(s->queued.size());
  delete s;
  --g_stats.streams_alive;
  return kSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t size, int kind, void* stream) {
  std::lock_guard lock(g_mutex);
  if (auto e = injected("cudaMemcpyAsync")) return e;
  const void* device = kind == 2 ? src : dst;  // cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice
  const void* host = kind == 2 ? dst : src;
  if ((kind != 1 && kind != 2) || !find(g_device_memory, device, size)) return kInvalidValue;
  ++g_stats.copies;
  if (!find(g_registered, host, size)) ++g_stats.copies_unpinned;
  if (!stream) {  // the legacy default stream: the fake runs it at once
    ++g_stats.copies_default_stream;
    std::memcpy(dst, src, size);
    return kSuccess;
  }
  static_cast<Stream*>(stream)->queued.push_back(Copy{dst, src, size});
  return kSuccess;
}

cudaError_t cudaStreamSynchronize(void* stream) {
  std::lock_guard lock(g_mutex);
  auto* s = static_cast<Stream*>(stream);
  if (!s) return kSuccess;
  if (auto e = injected("cudaStreamSynchronize")) {  // an asynchronous error: the copies did not happen
    s->queued.clear();
    return e;
  }
  for (const auto& c : s->queued) std::memcpy(c.dst, c.src, c.size);
  s->queued.clear();
  return kSuccess;
}

cudaError_t cudaHostRegister(void* pointer, std::size_t size, unsigned) {
  std::lock_guard lock(g_mutex);
  if (auto e = injected("cudaHostRegister")) return e;
  auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  if (!pointer || size == 0 || find(g_registered, pointer, 0)) return kInvalidValue;
  g_registered[begin] = Range{begin, begin + size, -1};
  ++g_stats.registered_ranges;
  return kSuccess;
}

cudaError_t cudaHostUnregister(void* pointer) {
  std::lock_guard lock(g_mutex);
  if (!g_registered.erase(reinterpret_cast<std::uintptr_t>(pointer))) return kInvalidValue;
  --g_stats.registered_ranges;
  return kSuccess;
}

}  // extern "C"
