// The one place that knows which torch the backend is built against (TORCH_VERSION_MAJOR from
// <torch/version.h>, in both Debian's libtorch-dev and the pip wheels' include directories):
//  * torch 1.13: a backend is a c10d::ProcessGroup subclass, registered by
//    Backend.register_backend(name, creator); torch hands it every tensor.
//  * torch 2.x: a backend is a c10d::Backend subclass that torch's ProcessGroup dispatches to per device
//    type, registered with register_backend(name, creator, devices=[...]); c10d::Backend has the same
//    virtual operations with the same signatures (1.13 already ships it, unused), so the group's code is
//    one source for both.
// Anything else that differs between the two APIs goes here, never as a second copy of the backend.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <optional>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace rdmakit::torch_backend {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
inline constexpr bool kTorch2 = true;
#else
using BackendBase = c10d::ProcessGroup;
inline constexpr bool kTorch2 = false;
#endif

// PREMUL_SUM's factor (torch 2.x FSDP divides gradients with it): a SUM of the inputs multiplied by it.
// The supplement holds a double or a one-element tensor; 1.13 kept a vector of tensors instead.
inline std::optional<double> premul_factor(const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return std::nullopt;
  const auto* supplement = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "rdmakit: PREMUL_SUM without its factor");
#if TORCH_VERSION_MAJOR >= 2
  if (supplement->tensor_factor.defined()) return supplement->tensor_factor.item<double>();
#else
  if (!supplement->tensor_factors.empty()) return supplement->tensor_factors.front().item<double>();
#endif
  return supplement->double_factor;
}

}  // namespace rdmakit::torch_backend
