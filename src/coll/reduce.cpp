// The loops are written so that g++ -O3 vectorizes them (checked with -fopt-info-vec-optimized, see
// bench/coll/README.md): plain indexed loops over one type, the operator a template parameter inlined
// into the loop body. This file is compiled with -O3 whatever the build type (CMakeLists.txt).
#include "coll/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rdmakit::coll::detail {
namespace {

struct Add {
  template <typename T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(a + b);
  }
};
struct Mul {
  template <typename T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(a * b);
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) noexcept {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) noexcept {
    return a < b ? b : a;
  }
};

struct BitAnd {
  template <typename T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(a & b);
  }
};
struct BitOr {
  template <typename T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(a | b);
  }
};
struct BitXor {
  template <typename T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(a ^ b);
  }
};

template <typename T, typename Op>
void loop(T* out, const T* a, const T* b, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i) out[i] = Op::template apply<T>(a[i], b[i]);
}

// 16-bit floats: widen to float, apply, narrow; in blocks so the widened values stay in L1.
template <float (*Widen)(unsigned short), unsigned short (*Narrow)(float), typename Op>
void loop16(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t count) noexcept {
  constexpr std::size_t kBlock = 256;
  float fa[kBlock], fb[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    std::size_t n = std::min(kBlock, count - base);
    for (std::size_t i = 0; i < n; ++i) fa[i] = Widen(a[base + i]);
    for (std::size_t i = 0; i < n; ++i) fb[i] = Widen(b[base + i]);
    for (std::size_t i = 0; i < n; ++i) fa[i] = Op::template apply<float>(fa[i], fb[i]);
    for (std::size_t i = 0; i < n; ++i) out[base + i] = Narrow(fa[i]);
  }
}

float widen_half(unsigned short bits) { return half_to_float(bits); }
unsigned short narrow_half(float v) { return float_to_half(v); }
float widen_bf16(unsigned short bits) { return bf16_to_float(bits); }
unsigned short narrow_bf16(float v) { return float_to_bf16(v); }

// The integer types: every operator, bitwise ones included. True when `type` is one.
template <typename Op>
bool dispatch_integer(void* out, const void* a, const void* b, std::size_t n, DataType type) noexcept {
  switch (type) {
    case DataType::I32:
      loop<std::int32_t, Op>(static_cast<std::int32_t*>(out), static_cast<const std::int32_t*>(a),
                             static_cast<const std::int32_t*>(b), n);
      return true;
    case DataType::I64:
      loop<std::int64_t, Op>(static_cast<std::int64_t*>(out), static_cast<const std::int64_t*>(a),
                             static_cast<const std::int64_t*>(b), n);
      return true;
    case DataType::U8:
      loop<std::uint8_t, Op>(static_cast<std::uint8_t*>(out), static_cast<const std::uint8_t*>(a),
                             static_cast<const std::uint8_t*>(b), n);
      return true;
    case DataType::I8:
      loop<std::int8_t, Op>(static_cast<std::int8_t*>(out), static_cast<const std::int8_t*>(a),
                            static_cast<const std::int8_t*>(b), n);
      return true;
    default:
      return false;
  }
}

template <typename Op>
void dispatch(void* out, const void* a, const void* b, std::size_t n, DataType type) noexcept {
  if (dispatch_integer<Op>(out, a, b, n, type)) return;
  switch (type) {
    case DataType::F32:
      return loop<float, Op>(static_cast<float*>(out), static_cast<const float*>(a),
                             static_cast<const float*>(b), n);
    case DataType::F64:
      return loop<double, Op>(static_cast<double*>(out), static_cast<const double*>(a),
                              static_cast<const double*>(b), n);
    case DataType::F16:
      return loop16<widen_half, narrow_half, Op>(static_cast<std::uint16_t*>(out),
                                                 static_cast<const std::uint16_t*>(a),
                                                 static_cast<const std::uint16_t*>(b), n);
    case DataType::BF16:
      return loop16<widen_bf16, narrow_bf16, Op>(static_cast<std::uint16_t*>(out),
                                                 static_cast<const std::uint16_t*>(a),
                                                 static_cast<const std::uint16_t*>(b), n);
    default:
      return;  // the integer types, done above
  }
}

template <typename T>
void divide(T* data, std::size_t count, T divisor) noexcept {
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] / divisor);
}

template <float (*Widen)(unsigned short), unsigned short (*Narrow)(float)>
void divide16(std::uint16_t* data, std::size_t count, float divisor) noexcept {
  for (std::size_t i = 0; i < count; ++i) data[i] = Narrow(Widen(data[i]) / divisor);
}

}  // namespace

void reduce(void* out, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return dispatch<Add>(out, a, b, count, type);
    case ReduceOp::Prod:
      return dispatch<Mul>(out, a, b, count, type);
    case ReduceOp::Min:
      return dispatch<Min>(out, a, b, count, type);
    case ReduceOp::Max:
      return dispatch<Max>(out, a, b, count, type);
    // The communicator refuses a bitwise operator on a float type before any data moves.
    case ReduceOp::BAnd:
      (void)dispatch_integer<BitAnd>(out, a, b, count, type);
      return;
    case ReduceOp::BOr:
      (void)dispatch_integer<BitOr>(out, a, b, count, type);
      return;
    case ReduceOp::BXor:
      (void)dispatch_integer<BitXor>(out, a, b, count, type);
      return;
  }
}

void finish_average(void* data, std::size_t count, DataType type, int divisor) noexcept {
  switch (type) {
    case DataType::F32:
      return divide(static_cast<float*>(data), count, static_cast<float>(divisor));
    case DataType::F64:
      return divide(static_cast<double*>(data), count, static_cast<double>(divisor));
    case DataType::I32:
      return divide(static_cast<std::int32_t*>(data), count, static_cast<std::int32_t>(divisor));
    case DataType::I64:
      return divide(static_cast<std::int64_t*>(data), count, static_cast<std::int64_t>(divisor));
    case DataType::U8:
      return divide(static_cast<std::uint8_t*>(data), count, static_cast<std::uint8_t>(divisor));
    case DataType::I8:
      return divide(static_cast<std::int8_t*>(data), count, static_cast<std::int8_t>(divisor));
    case DataType::F16:
      return divide16<widen_half, narrow_half>(static_cast<std::uint16_t*>(data), count,
                                               static_cast<float>(divisor));
    case DataType::BF16:
      return divide16<widen_bf16, narrow_bf16>(static_cast<std::uint16_t*>(data), count,
                                               static_cast<float>(divisor));
  }
}

void widen16(float* out, const void* in, std::size_t count, DataType type) noexcept {
  const auto* bits = static_cast<const std::uint16_t*>(in);
  if (type == DataType::BF16)
    for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_float(bits[i]);
  else
    for (std::size_t i = 0; i < count; ++i) out[i] = half_to_float(bits[i]);
}

namespace {

// The f32 nearest to `value` toward zero, with its last bit set when inexact ("round to odd"): it keeps
// 24 bits and remembers that more followed, so rounding it to 8 or 11 bits rounds `value` itself.
float round_to_odd(double value) noexcept {
  float nearest = static_cast<float>(value);
  if (std::isnan(value) || static_cast<double>(nearest) == value) return nearest;
  if (std::abs(static_cast<double>(nearest)) > std::abs(value)) nearest = std::nextafter(nearest, 0.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(nearest) | 1u);
}

}  // namespace

void narrow_average16(void* out, const float* sum, std::size_t count, DataType type, int divisor) noexcept {
  auto* bits = static_cast<std::uint16_t*>(out);
  auto n = static_cast<double>(divisor);
  if (type == DataType::BF16)
    for (std::size_t i = 0; i < count; ++i) bits[i] = float_to_bf16(round_to_odd(sum[i] / n));
  else
    for (std::size_t i = 0; i < count; ++i) bits[i] = float_to_half(round_to_odd(sum[i] / n));
}

// Branch-light conversions: the exponent is rebased; subnormals go through a float multiply.
float half_to_float(unsigned short bits) noexcept {
  std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal (or zero): exact
  } else if (exponent == 31) {
    magnitude = std::bit_cast<float>(0x7f800000u | (mantissa << 13));  // inf / nan
  } else {
    magnitude = std::bit_cast<float>(((exponent + 112u) << 23) | (mantissa << 13));
  }
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
}

unsigned short float_to_half(float value) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)
    return static_cast<unsigned short>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half: round through a float add
    float f =
        std::bit_cast<float>(abs) + 0.5f;  // 0.5 = 2^-1; ulp of the sum is 2^-24, the half subnormal step
    return static_cast<unsigned short>(sign | (std::bit_cast<std::uint32_t>(f) - 0x3f000000u));
  }
  std::uint32_t odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + odd;  // rebase the exponent by -112 and round to nearest even
  return static_cast<unsigned short>(sign | (abs >> 13));
}

float bf16_to_float(unsigned short bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

unsigned short float_to_bf16(float value) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<unsigned short>((x >> 16) | 0x40u);  // keep nan a nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<unsigned short>(x >> 16);
}

}  // namespace rdmakit::coll::detail
