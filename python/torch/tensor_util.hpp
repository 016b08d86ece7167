// Checks and conversions between torch tensors and the communicator's buffers.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/coll/types.hpp"
#include "rdmakit/error.hpp"
#include "torch_compat.hpp"

namespace rdmakit::torch_backend {

// Turns a communicator failure into the exception the Work carries to Python ("rdmakit allreduce failed:
// Timeout: ..."), so the cause reaches the user with the operation named.
inline void throw_if_failed(const Result<void>& result, std::string_view what) {
  if (!result)
    throw std::runtime_error("rdmakit " + std::string(what) + " failed: " + result.error().describe());
}

// Why a tensor on `device` cannot be moved, or nullopt when it can (a CPU tensor). CUDA tensors are refused
// rather than copied through host memory on the backend's worker thread: that copy would run on the worker's
// stream, unordered with the caller's stream that produced the tensor (wrong numbers, silently), and the
// result copied back would be unordered with the caller's next kernels. Stream-ordered pinned staging, as
// Gloo does, is issue #26's remaining work; until then the caller copies (torch 2.x registers the backend for
// "cuda" too, so a CUDA tensor reaches this check and gets this message instead of torch's generic one).
inline std::optional<std::string> device_refusal(const c10::Device& device, std::string_view op) {
  if (device.is_cpu()) return std::nullopt;
  return "rdmakit " + std::string(op) + ": the tensor is on " + device.str() +
         ", but the rdmakit backend moves CPU tensors only: copy it with .cpu() first (and the result back "
         "with .to('" +
         device.str() + "'))";
}

// Every tensor the backend touches: defined, on the CPU (device_refusal), strided (dense). Non-contiguous
// tensors are staged through a contiguous copy.
inline void check_tensor(const at::Tensor& tensor, std::string_view op) {
  TORCH_CHECK(tensor.defined(), "rdmakit ", op, ": the tensor is undefined");
  const auto refusal = device_refusal(tensor.device(), op);
  TORCH_CHECK(!refusal, *refusal);
  TORCH_CHECK(tensor.layout() == at::kStrided, "rdmakit ", op,
              ": only dense (strided) tensors are supported, got ", tensor.layout());
}

inline void check_single(const std::vector<at::Tensor>& tensors, std::string_view op) {
  TORCH_CHECK(tensors.size() == 1, "rdmakit ", op, " takes exactly one tensor per call, got ",
              tensors.size());
  check_tensor(tensors[0], op);
}

inline void check_same_type(const at::Tensor& a, const at::Tensor& b, std::string_view op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "rdmakit ", op, ": tensors must have one dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
}

// The element types the communicator reduces. Moving bytes (broadcast, gathers, all-to-all, send/recv) works
// for every dtype: those ops go as U8.
inline std::optional<coll::DataType> reduction_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return coll::DataType::F32;
    case at::kDouble:
      return coll::DataType::F64;
    case at::kHalf:
      return coll::DataType::F16;
    case at::kBFloat16:
      return coll::DataType::BF16;
    case at::kInt:
      return coll::DataType::I32;
    case at::kLong:
      return coll::DataType::I64;
    case at::kByte:
    case at::kBool:  // one byte, 0 or 1: reduced as u8 with the ops of bool_op()
      return coll::DataType::U8;
    case at::kChar:
      return coll::DataType::I8;
    default:
      return std::nullopt;
  }
}

inline coll::DataType checked_reduction_type(const at::Tensor& tensor, std::string_view op) {
  auto type = reduction_type(tensor.scalar_type());
  TORCH_CHECK(
      type.has_value(), "rdmakit ", op, ": dtype ", tensor.scalar_type(),
      " cannot be reduced (supported: float32, float64, float16, bfloat16, int32, int64, uint8, int8, bool)");
  return *type;
}

// Over bool (0 or 1 as u8), as gloo and NCCL reduce it: SUM is OR (MAX), PRODUCT is AND (MIN).
inline coll::ReduceOp bool_op(coll::ReduceOp op, std::string_view name) {
  TORCH_CHECK(op != coll::ReduceOp::Avg, "rdmakit ", name, ": AVG of bool tensors is not defined");
  if (op == coll::ReduceOp::Sum) return coll::ReduceOp::Max;
  if (op == coll::ReduceOp::Prod) return coll::ReduceOp::Min;
  return op;
}

inline coll::ReduceOp checked_reduce_op(const c10d::ReduceOp& op, std::string_view name);

// The operator for `tensor`'s dtype: bitwise ones take integer and bool tensors only.
inline coll::ReduceOp checked_reduce_op(const c10d::ReduceOp& op, std::string_view name,
                                        const at::Tensor& tensor) {
  coll::ReduceOp chosen = checked_reduce_op(op, name);
  TORCH_CHECK(!coll::is_bitwise(chosen) || !at::isFloatingType(tensor.scalar_type()), "rdmakit ", name,
              ": BAND, BOR and BXOR take integer or bool tensors, got ", tensor.scalar_type());
  return tensor.scalar_type() == at::kBool ? bool_op(chosen, name) : chosen;
}

inline coll::ReduceOp checked_reduce_op(const c10d::ReduceOp& op, std::string_view name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return coll::ReduceOp::Sum;
    case c10d::ReduceOp::AVG:
      return coll::ReduceOp::Avg;
    case c10d::ReduceOp::PRODUCT:
      return coll::ReduceOp::Prod;
    case c10d::ReduceOp::MIN:
      return coll::ReduceOp::Min;
    case c10d::ReduceOp::MAX:
      return coll::ReduceOp::Max;
    case c10d::ReduceOp::PREMUL_SUM:  // the inputs are multiplied first (premultiplied())
      return coll::ReduceOp::Sum;
    case c10d::ReduceOp::BAND:
      return coll::ReduceOp::BAnd;
    case c10d::ReduceOp::BOR:
      return coll::ReduceOp::BOr;
    case c10d::ReduceOp::BXOR:
      return coll::ReduceOp::BXor;
    default:
      TORCH_CHECK(false, "rdmakit ", name, ": reduce op ", static_cast<int>(op.op_),
                  " is not supported (supported: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM)");
  }
}

// A contiguous host tensor holding `tensor`'s values: the tensor itself when it is a contiguous CPU one,
// else a copy. After the communicator wrote into it, write_back() puts the result into the original.
inline at::Tensor staged(const at::Tensor& tensor) { return tensor.contiguous(); }  // CPU only (check_tensor)

// `staging` (staged()) multiplied by PREMUL_SUM's factor, in place when `in_place` (the tensor is
// overwritten by the result anyway), else into a new tensor; unchanged for every other op.
inline at::Tensor premultiplied(at::Tensor staging, const c10d::ReduceOp& op, bool in_place) {
  auto factor = premul_factor(op);
  if (!factor) return staging;
  return in_place ? staging.mul_(*factor) : staging.mul(*factor);
}
inline void write_back(at::Tensor& original, const at::Tensor& staging) {
  if (!original.is_same(staging)) original.copy_(staging);
}

// Copies `tensors` one after another into a new flat tensor of their dtype.
inline at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  auto flat = at::empty({total},
                        tensors.at(0).options().device(at::kCPU).memory_format(at::MemoryFormat::Contiguous));
  int64_t offset = 0;
  for (const auto& t : tensors) {
    flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
    offset += t.numel();
  }
  return flat;
}

// The inverse: `flat`'s elements from `offset` on, one tensor after another, into `tensors`.
inline void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors, int64_t offset = 0) {
  for (auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

inline std::byte* bytes_of(const at::Tensor& contiguous) {
  return static_cast<std::byte*>(contiguous.data_ptr());
}

}  // namespace rdmakit::torch_backend
