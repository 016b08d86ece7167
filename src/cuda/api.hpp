// The parts of the CUDA runtime and driver APIs that rdmakit calls, declared here from NVIDIA's
// documentation (cuda_runtime_api.h, driver_types.h, cuda.h) so that nothing includes or links CUDA: the
// library loads libcudart and libcuda.so.1 with dlopen when a region or buffer is device memory
// (runtime.hpp, driver.hpp). The values below are part of CUDA's ABI, stable across CUDA 11-13.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdmakit::detail::cuda {

// ---- Runtime API (libcudart) ----
using Error = int;     // cudaError_t; 0 is cudaSuccess
using Stream = void*;  // cudaStream_t (an opaque CUstream_st*)
using Event = void*;   // cudaEvent_t
inline constexpr Error kSuccess = 0;
inline constexpr Error kErrorNotReady = 600;            // cudaErrorNotReady (stream/event still running)
inline constexpr unsigned kStreamNonBlocking = 0x01;    // cudaStreamNonBlocking
inline constexpr unsigned kEventDisableTiming = 0x02;   // cudaEventDisableTiming
inline constexpr unsigned kHostRegisterDefault = 0x00;  // cudaHostRegisterDefault
inline constexpr unsigned kIpcMemLazyEnablePeerAccess = 0x01;  // cudaIpcMemLazyEnablePeerAccess
enum MemcpyKind : int {
  kHostToHost = 0,
  kHostToDevice = 1,
  kDeviceToHost = 2,
  kDeviceToDevice = 3,
  kDefault = 4,  // inferred from the pointers (unified addressing)
};
enum MemoryType : int { kUnregistered = 0, kHost = 1, kDevice = 2, kManaged = 3 };
struct PointerAttributes {  // cudaPointerAttributes (CUDA >= 10), with its reserved tail
  int type;                 // MemoryType
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
  long spare[8];  // room should a later runtime grow the structure again
};
// cudaIpcMemHandle_t: 64 opaque bytes (CUDA_IPC_HANDLE_SIZE), passed by value.
struct IpcMemHandle {
  char reserved[64];
};
static_assert(sizeof(IpcMemHandle) == 64);

// ---- Driver API (libcuda.so.1) ----
using DriverResult = int;                  // CUresult; 0 is CUDA_SUCCESS
using DevicePointer = unsigned long long;  // CUdeviceptr
inline constexpr DriverResult kDriverSuccess = 0;
inline constexpr DriverResult kDriverNotFound = 500;  // CUDA_ERROR_NOT_FOUND: not a device pointer
// CUpointer_attribute
inline constexpr int kPointerMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE (CUmemorytype)
inline constexpr int kPointerIsManaged = 8;      // CU_POINTER_ATTRIBUTE_IS_MANAGED
inline constexpr int kPointerDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
// CUmemorytype
inline constexpr unsigned kDriverMemoryHost = 1, kDriverMemoryDevice = 2;
// CUdevice_attribute
inline constexpr int kDeviceDmaBufSupported = 124;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
// CUmemRangeHandleType
inline constexpr int kRangeHandleDmaBufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD

}  // namespace rdmakit::detail::cuda
