// The driver API symbols the library reaches through libcuda.so.1 (CUresult = int, CUdeviceptr =
// unsigned long long, CUdevice = int), over the same state as the runtime: a cudaMalloc'ed pointer is a
// CUdeviceptr of the same allocation, as with the real unified address space.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "fake_cudart/state.hpp"

using namespace fake_cudart;

namespace {

using CUdeviceptr = unsigned long long;

enum Attribute {  // CUpointer_attribute
  kMemoryType = 2,
  kDevicePointer = 3,
  kHostPointer = 4,
  kBufferId = 7,
  kIsManaged = 8,
  kDeviceOrdinal = 9,
  kRangeStartAddr = 11,
  kRangeSize = 12,
};
constexpr unsigned kMemoryTypeHost = 1, kMemoryTypeDevice = 2;                    // CUmemorytype
constexpr int kAttributeUnifiedAddressing = 41, kAttributeDmaBufSupported = 124;  // CUdevice_attribute
constexpr int kHandleTypeDmaBufFd = 1;              // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
constexpr unsigned long long kFlagMappingPcie = 1;  // CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE

const void* as_pointer(CUdeviceptr p) {
  return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(p));
}

template <typename T>
void put(void* data, T value) {
  std::memcpy(data, &value, sizeof value);
}

// One attribute of a known pointer (device memory `a`, or registered host memory `h`), written as the
// type cuda.h documents for it (IS_MANAGED as a 4-byte unsigned, as UCX reads it).
int attribute_of(void* data, int attribute, CUdeviceptr ptr, const Allocation* a, const HostRange* h) {
  bool managed = a && a->kind == Kind::Managed;
  switch (attribute) {
    case kMemoryType:  // managed memory is CU_MEMORYTYPE_DEVICE with IS_MANAGED set
      return put(data, a ? kMemoryTypeDevice : kMemoryTypeHost), kSuccess;
    case kDevicePointer:
      return put(data, ptr), kSuccess;
    case kHostPointer:
      if (a && !managed) return kInvalidValue;  // device memory has no host address
      return put(data, as_pointer(ptr)), kSuccess;
    case kBufferId:
      return put(data, static_cast<unsigned long long>(a ? a->buffer_id : h->buffer_id)), kSuccess;
    case kIsManaged:
      return put(data, static_cast<unsigned>(managed)), kSuccess;
    case kDeviceOrdinal:
      return put(data, a ? a->device : h->device), kSuccess;
    case kRangeStartAddr:
      return put(data, static_cast<CUdeviceptr>(a ? a->base : h->begin)), kSuccess;
    case kRangeSize:
      return put(data, a ? a->size : h->end - h->begin), kSuccess;
  }
  return kInvalidValue;  // an attribute the fake does not model: say so rather than answer wrongly
}

// The zero value cuPointerGetAttributes writes for an unknown pointer, in the attribute's size.
int default_of(void* data, int attribute) {
  switch (attribute) {
    case kMemoryType:
    case kIsManaged:
      return put(data, 0u), kSuccess;
    case kDeviceOrdinal:
      return put(data, -2), kSuccess;  // cudaInvalidDeviceId
    case kDevicePointer:
    case kHostPointer:
    case kBufferId:
    case kRangeStartAddr:
    case kRangeSize:
      return put(data, 0ull), kSuccess;
  }
  return kInvalidValue;
}

const char* driver_error_string(int error) {
  switch (error) {
    case kSuccess:
      return "no error";
    case kInvalidValue:
      return "invalid argument";
    case kMemoryAllocation:
      return "out of memory";
    case 3:
      return "initialization error";
    case kNoDevice:
      return "no CUDA-capable device is detected";
    case kInvalidDevice:
      return "invalid device ordinal";
    case kDeviceUninitialized:
      return "invalid device context";
    case kNotFound:
      return "named symbol not found";
    case kNotReady:
      return "device not ready";
    case kNotSupported:
      return "operation not supported";
  }
  return nullptr;
}

}  // namespace

extern "C" {

int cuInit(unsigned flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (flags != 0) return kInvalidValue;
  return state().stats.devices == 0 ? kNoDevice : kSuccess;
}

int cuDriverGetVersion(int* version) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!version) return kInvalidValue;
  *version = 13000;
  return kSuccess;
}

// An unknown code: CUDA_ERROR_INVALID_VALUE and a null string, as cuda.h documents.
int cuGetErrorString(int error, const char** text) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!text) return kInvalidValue;
  *text = driver_error_string(error);
  return *text ? kSuccess : kInvalidValue;
}

int cuDeviceGetCount(int* count) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!count) return kInvalidValue;
  *count = state().stats.devices;
  return kSuccess;
}

int cuDeviceGet(int* device, int ordinal) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!device) return kInvalidValue;
  if (ordinal < 0 || ordinal >= state().stats.devices) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

// Only the attributes the fake models; any other is CUDA_ERROR_INVALID_VALUE (extend it when needed).
int cuDeviceGetAttribute(int* value, int attribute, int device) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!value) return kInvalidValue;
  if (device < 0 || device >= state().stats.devices) return kInvalidDevice;
  if (attribute == kAttributeDmaBufSupported) return *value = state().dmabuf_supported ? 1 : 0, kSuccess;
  if (attribute == kAttributeUnifiedAddressing) return *value = 1, kSuccess;
  return kInvalidValue;
}

int cuMemGetAddressRange_v2(CUdeviceptr* base, std::size_t* size, CUdeviceptr ptr) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  const Allocation* a = find_allocation(as_pointer(ptr), 0);
  if (!a) return kNotFound;
  if (base) *base = a->base;
  if (size) *size = a->size;
  return kSuccess;
}

int cuPointerGetAttribute(void* data, int attribute, CUdeviceptr ptr) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!data) return kInvalidValue;
  const Allocation* a = find_allocation(as_pointer(ptr), 0);
  const HostRange* h = a ? nullptr : find_registered(as_pointer(ptr), 0);
  if (!a && !h) return kInvalidValue;  // not a pointer CUDA knows
  return attribute_of(data, attribute, ptr, a, h);
}

// Unlike cuPointerGetAttribute, an unknown pointer is no error: every attribute gets its null value.
int cuPointerGetAttributes(unsigned count, int* attributes, void** data, CUdeviceptr ptr) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!attributes || !data) return kInvalidValue;
  const Allocation* a = find_allocation(as_pointer(ptr), 0);
  const HostRange* h = a ? nullptr : find_registered(as_pointer(ptr), 0);
  for (unsigned i = 0; i < count; ++i) {
    if (!data[i]) return kInvalidValue;
    int e = a || h ? attribute_of(data[i], attributes[i], ptr, a, h) : default_of(data[i], attributes[i]);
    if (e != kSuccess) return e;
  }
  return kSuccess;
}

// A dmabuf fd of device memory: here a new fd of the allocation's memfd (so it can be mmap'ed and checked).
// As cuda.h requires, dptr and size are page-aligned and lie in one cudaMalloc allocation. The fake's fd
// can only stand for the whole allocation from its base (a real dmabuf of a sub-range starts at dptr),
// so any other range is CUDA_ERROR_NOT_SUPPORTED rather than an fd that means something else.
int cuMemGetHandleForAddressRange(void* handle, CUdeviceptr dptr, std::size_t size, int type,
                                  unsigned long long flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!handle || type != kHandleTypeDmaBufFd || (flags & ~kFlagMappingPcie)) return kInvalidValue;
  if (flags & kFlagMappingPcie) return kNotSupported;  // no PCIe BAR1 mapping on this "platform"
  if (!state().dmabuf_supported) return kNotSupported;
  std::size_t page = page_size();
  if (size == 0 || dptr % page || size % page) return kInvalidValue;
  const Allocation* a = find_allocation(as_pointer(dptr), 0);
  if (!a || a->kind == Kind::Managed || size > a->base + a->mapped - dptr) return kInvalidValue;
  if (dptr != a->base || size != a->mapped) return kNotSupported;
  int fd = ::fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return kMemoryAllocation;
  std::memcpy(handle, &fd, sizeof fd);
  ++state().stats.dmabuf_exports;
  return kSuccess;
}

}  // extern "C"
