// The CUDA layer's options: which runtime and driver libraries it loads. Process-wide (one loader per
// process), read from the environment when CUDA is first needed; listed by `rdmakit-info --config`.
#pragma once

#include <string>

#include "core/option_table.hpp"

namespace rdmakit::detail::cuda {

struct CudaConfig {
  std::string runtime{};  // cuda_runtime: a libcudart file name or path; empty = the usual sonames
  std::string driver{};   // cuda_driver: the driver library (libcuda.so.1)
};

// From the environment (RDMAKIT_CUDA_RUNTIME, RDMAKIT_CUDA_DRIVER) and the defaults; never fails (both are
// names handed to dlopen, whose error names them).
CudaConfig cuda_options();
const options::Table& cuda_option_table();

}  // namespace rdmakit::detail::cuda
