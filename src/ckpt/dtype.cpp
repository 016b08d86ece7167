#include <array>

#include "rdmakit/ckpt/types.hpp"

namespace rdmakit::ckpt {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, 12> kDTypes{{{DType::U8, "u8", 1},
                                             {DType::I8, "i8", 1},
                                             {DType::U16, "u16", 2},
                                             {DType::I16, "i16", 2},
                                             {DType::U32, "u32", 4},
                                             {DType::I32, "i32", 4},
                                             {DType::U64, "u64", 8},
                                             {DType::I64, "i64", 8},
                                             {DType::F16, "f16", 2},
                                             {DType::BF16, "bf16", 2},
                                             {DType::F32, "f32", 4},
                                             {DType::F64, "f64", 8}}};

}  // namespace

std::string_view to_string(DType dtype) noexcept {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.name;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view text) noexcept {
  for (const auto& info : kDTypes)
    if (info.name == text) return info.dtype;
  return std::nullopt;
}

std::size_t dtype_size(DType dtype) noexcept {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.size;
  return 1;
}

}  // namespace rdmakit::ckpt
