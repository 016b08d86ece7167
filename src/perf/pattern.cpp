#include "perf/pattern.hpp"

namespace rdmakit::perf {
namespace {
inline std::uint8_t pattern_byte(std::size_t i, std::uint64_t seed) {
  return static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
}
}  // namespace

void fill_pattern(void* data, std::size_t size, std::uint64_t seed) {
  auto* bytes = static_cast<std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = pattern_byte(i, seed);
}

std::optional<std::size_t> find_mismatch(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i)
    if (bytes[i] != pattern_byte(i, seed)) return i;
  return std::nullopt;
}

std::string check_pattern(const void* data, std::size_t size, std::uint64_t seed, const std::string& what) {
  auto bad = find_mismatch(data, size, seed);
  if (!bad) return {};
  return what + ": byte " + std::to_string(*bad) + " of " + std::to_string(size) + " differs";
}

}  // namespace rdmakit::perf
