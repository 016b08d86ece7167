// The few CUDA runtime functions the checkpoint engine calls, loaded with dlopen so that nothing links (or
// needs the headers of) CUDA: a build without the toolkit compiles this, and a process without a GPU pays
// nothing until a buffer says MemoryKind::Cuda.
//
// The types below are declared here from the CUDA runtime API documentation (cuda_runtime_api.h,
// driver_types.h): the ABI is stable across CUDA 10-13. Untested on a GPU (docs/ckpt.md): the unit tests
// load a fake library with the same symbols (tests/unit/fake_cudart/).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "rdmakit/error.hpp"

namespace rdmakit::ckpt::detail {

namespace cuda {
using Error = int;     // cudaError_t; 0 is cudaSuccess
using Stream = void*;  // cudaStream_t (an opaque CUstream_st*)
inline constexpr Error kSuccess = 0;
inline constexpr unsigned kStreamNonBlocking = 0x01;    // cudaStreamNonBlocking
inline constexpr unsigned kHostRegisterDefault = 0x00;  // cudaHostRegisterDefault
enum MemcpyKind : int { kHostToDevice = 1, kDeviceToHost = 2 };
enum MemoryType : int { kUnregistered = 0, kHost = 1, kDevice = 2, kManaged = 3 };
struct PointerAttributes {  // cudaPointerAttributes (CUDA >= 10), with its reserved tail
  int type;                 // MemoryType
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
  long spare[8];  // room should a later runtime grow the structure again
};
}  // namespace cuda

// A loaded CUDA runtime: the library stays loaded for the life of the process (unloading libcudart while
// the driver holds its state is not safe), so Runtime objects are cheap handles.
class CudaRuntime {
 public:
  // `library`: a file name or path for dlopen; empty tries libcudart.so.13, .12, .11.0 and libcudart.so.
  // Fails (Unavailable) when no library loads, a symbol is missing, or the runtime sees no device; the
  // message names what was tried and the runtime's own error text.
  static Result<CudaRuntime> load(const std::string& library);

  const std::string& library() const noexcept { return library_; }
  // "cudaMemcpyAsync: <the runtime's text> (error N)".
  std::string describe(const char* call, cuda::Error error) const;

  cuda::Error (*get_device_count)(int*) = nullptr;
  cuda::Error (*get_device)(int*) = nullptr;
  cuda::Error (*set_device)(int) = nullptr;
  cuda::Error (*pointer_get_attributes)(cuda::PointerAttributes*, const void*) = nullptr;
  cuda::Error (*stream_create_with_flags)(cuda::Stream*, unsigned) = nullptr;
  cuda::Error (*stream_destroy)(cuda::Stream) = nullptr;
  cuda::Error (*stream_synchronize)(cuda::Stream) = nullptr;
  cuda::Error (*memcpy_async)(void*, const void*, std::size_t, int, cuda::Stream) = nullptr;
  cuda::Error (*host_register)(void*, std::size_t, unsigned) = nullptr;
  cuda::Error (*host_unregister)(void*) = nullptr;
  const char* (*get_error_string)(cuda::Error) = nullptr;

 private:
  std::string library_;
};

std::vector<std::string> default_cudart_names();

}  // namespace rdmakit::ckpt::detail
