// Reduction kernels: out[i] = a[i] op b[i] for every element type and operator. out may be a (in-place
// accumulation) but must not overlap b otherwise. Avg reduces as Sum; finish_average() divides at the end.
#pragma once

#include <cstddef>

#include "rdmakit/coll/types.hpp"

namespace rdmakit::coll::detail {

void reduce(void* out, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op) noexcept;
// data[i] /= divisor (integers: truncating division).
void finish_average(void* data, std::size_t count, DataType type, int divisor) noexcept;

// IEEE half and bfloat16 conversions (round to nearest even), exposed for tests.
float half_to_float(unsigned short bits) noexcept;
unsigned short float_to_half(float value) noexcept;
float bf16_to_float(unsigned short bits) noexcept;
unsigned short float_to_bf16(float value) noexcept;

}  // namespace rdmakit::coll::detail
