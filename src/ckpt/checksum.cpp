#include "ckpt/checksum.hpp"

#include <bit>
#include <cstring>

namespace rdmakit::ckpt {
namespace {

// Odd 64-bit constants with well-mixed bits (fractional parts of irrational numbers).
constexpr std::uint64_t kMulA = 0x9e3779b97f4a7c15ull;  // golden ratio
constexpr std::uint64_t kMulB = 0xd6e8feb86659fd93ull;
constexpr std::uint64_t kMulC = 0xff51afd7ed558ccdull;

inline std::uint64_t load64(const unsigned char* p) noexcept {
  std::uint64_t word;
  std::memcpy(&word, p, sizeof(word));
  return word;  // little-endian hosts only; the manifest records the checksum as computed here
}

inline std::uint64_t step(std::uint64_t lane, std::uint64_t word) noexcept {
  lane += word * kMulB;
  lane = std::rotl(lane, 29);
  return lane * kMulA;
}

// Spreads every input bit over the whole word (a bijection).
inline std::uint64_t finish(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= kMulC;
  h ^= h >> 29;
  h *= kMulB;
  h ^= h >> 32;
  return h;
}

}  // namespace

std::uint64_t checksum64(const void* data, std::size_t size, std::uint64_t seed) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t lane[4] = {seed + kMulA, seed ^ kMulB, seed - kMulA, ~seed};
  std::size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    lane[0] = step(lane[0], load64(p + i));
    lane[1] = step(lane[1], load64(p + i + 8));
    lane[2] = step(lane[2], load64(p + i + 16));
    lane[3] = step(lane[3], load64(p + i + 24));
  }
  std::uint64_t h =
      std::rotl(lane[0], 1) + std::rotl(lane[1], 7) + std::rotl(lane[2], 12) + std::rotl(lane[3], 18);
  for (std::uint64_t l : lane) h = (h ^ finish(l)) * kMulA;
  for (; i + 8 <= size; i += 8) h = step(h, load64(p + i));
  // The tail's bytes one by one, each tagged with its position so that zeros at the end still count.
  for (; i < size; ++i) h = step(h, (std::uint64_t{p[i]} << 8) | (i & 0xff) | 0x10000);
  return finish(h ^ static_cast<std::uint64_t>(size));
}

}  // namespace rdmakit::ckpt
