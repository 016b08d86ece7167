// Reduction kernels: out[i] = a[i] op b[i] for every element type and operator. out may be a (in-place
// accumulation) but must not overlap b otherwise. Avg reduces as Sum; finish_average() divides at the end.
// Avg over f16/bf16 does not use these at the element type: the collectives widen the inputs to f32,
// sum in f32 and round each mean once (widen16(), narrow_average16(); see average16() in algorithms.hpp).
#pragma once

#include <cstddef>

#include "rdmakit/coll/types.hpp"

namespace rdmakit::coll::detail {

void reduce(void* out, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op) noexcept;
// data[i] /= divisor (integers: truncating division).
void finish_average(void* data, std::size_t count, DataType type, int divisor) noexcept;

// Avg over a 16-bit float type takes the f32 path.
constexpr bool averages_in_f32(DataType type, ReduceOp op) noexcept {
  return op == ReduceOp::Avg && (type == DataType::F16 || type == DataType::BF16);
}
// out[i] = in[i] as f32 (exact). type: F16 or BF16.
void widen16(float* out, const void* in, std::size_t count, DataType type) noexcept;
// out[i] = sum[i] / divisor rounded once to `type` (nearest, ties to even): the quotient is formed in
// double and narrowed through an f32 rounded to odd, so no second rounding can move it.
void narrow_average16(void* out, const float* sum, std::size_t count, DataType type, int divisor) noexcept;

// IEEE half and bfloat16 conversions (round to nearest even), exposed for tests.
float half_to_float(unsigned short bits) noexcept;
unsigned short float_to_half(float value) noexcept;
float bf16_to_float(unsigned short bits) noexcept;
unsigned short float_to_bf16(float value) noexcept;

}  // namespace rdmakit::coll::detail
