// Element types and reduction operators of the collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rdmakit/export.hpp"

namespace rdmakit::coll {

enum class DataType : std::uint8_t { F32, F64, F16, BF16, I32, I64, U8, I8 };
// Sum, Prod, Min and Max compute in the element type (16-bit floats: widened to f32 for each addition
// and rounded back, at every step). Avg over integers truncates. Avg over F16/BF16 sums in f32 (the
// partial sums travel as f32: twice the bytes) and rounds each mean once, to nearest even: the result is
// the correctly rounded mean whenever the f32 sum is exact (an element's values spanning at most
// 24 - p - ceil(log2 n) binades, p = 8 for BF16, 11 for F16). BAnd, BOr and BXor (bitwise) take the
// integer types only (I8, U8, I32, I64); on a float type they are an InvalidArgument error.
enum class ReduceOp : std::uint8_t { Sum, Prod, Min, Max, Avg, BAnd, BOr, BXor };

constexpr bool is_bitwise(ReduceOp op) noexcept {
  return op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
}

constexpr bool is_integer(DataType type) noexcept {
  return type == DataType::I32 || type == DataType::I64 || type == DataType::U8 || type == DataType::I8;
}

constexpr std::size_t size_of(DataType type) noexcept {
  switch (type) {
    case DataType::F64:
    case DataType::I64:
      return 8;
    case DataType::F32:
    case DataType::I32:
      return 4;
    case DataType::F16:
    case DataType::BF16:
      return 2;
    case DataType::U8:
    case DataType::I8:
      return 1;
  }
  return 1;
}

RDMAKIT_API std::string_view to_string(DataType type) noexcept;
RDMAKIT_API std::string_view to_string(ReduceOp op) noexcept;

// Which allreduce algorithm runs. Auto chooses by message size and world size.
// Shared: through memory every rank maps (all ranks on one host over shm; shared.hpp): elsewhere it
// means Auto.
enum class Algorithm : std::uint8_t { Auto, Ring, RecursiveDoubling, HalvingDoubling, Shared };
RDMAKIT_API std::string_view to_string(Algorithm algorithm) noexcept;

// Whether allreduce runs hierarchically: reduce inside each host (local transport), allreduce among one
// leader per host (network transport, with the Algorithm above), broadcast inside each host. Auto: when
// ranks share hosts and there are several hosts.
enum class Hierarchy : std::uint8_t { Auto, On, Off };

}  // namespace rdmakit::coll
