// The CUDA driver (libcuda.so.1), loaded with dlopen beside the runtime for what the runtime API lacks: the
// base and size of the allocation a pointer lies in (cuMemGetAddressRange), and the dmabuf export of device
// memory for GPUDirect RDMA (cuMemGetHandleForAddressRange, CUDA >= 11.7 drivers).
#pragma once

#include <string>

#include "cuda/api.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::detail::cuda {

class Driver {
 public:
  // $RDMAKIT_CUDA_DRIVER, else libcuda.so.1; loaded and initialized (cuInit) once. Errc::Unavailable naming
  // the library and the missing symbol or the driver's error otherwise.
  static Result<const Driver*> get();

  const std::string& library() const noexcept { return library_; }
  std::string describe(const char* call, DriverResult result) const;

  DriverResult (*init)(unsigned) = nullptr;
  DriverResult (*get_error_string)(DriverResult, const char**) = nullptr;
  DriverResult (*mem_get_address_range)(DevicePointer*, std::size_t*, DevicePointer) = nullptr;
  DriverResult (*pointer_get_attribute)(void*, int, DevicePointer) = nullptr;
  DriverResult (*device_get_attribute)(int*, int, int) = nullptr;
  // Optional (null on drivers older than CUDA 11.7): dmabuf export of a device range.
  DriverResult (*mem_get_handle_for_address_range)(void*, DevicePointer, std::size_t, int,
                                                   unsigned long long) = nullptr;

 private:
  std::string library_;
};

}  // namespace rdmakit::detail::cuda
