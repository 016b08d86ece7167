#include "core/copy.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace rdmakit::detail {
namespace {

// When the cache sizes are unknown (sysconf says 0): a typical last-level cache share of one thread.
constexpr std::uint64_t kUnknownCacheThreshold = 16ull << 20;
// Never stream what fits a core's own caches, whatever sysconf says.
constexpr std::uint64_t kMinimumThreshold = 1ull << 20;

std::uint64_t cache_threshold() noexcept {
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (l3 <= 0) return kUnknownCacheThreshold;
  // glibc (sysdeps/x86/dl-cacheinfo.h): 3/4 of the per-thread share of the shared cache plus the core's
  // own L2. The online CPUs stand in for the threads sharing the cache.
  const auto share = static_cast<std::uint64_t>(l3) / static_cast<std::uint64_t>(std::max(cpus, 1L)) +
                     static_cast<std::uint64_t>(std::max(l2, 0L));
  return std::max(share / 4 * 3, kMinimumThreshold);
}

std::atomic<std::uint64_t> threshold_override{0};

#if defined(__x86_64__)
// SSE2 is part of x86-64, so no dispatch: 16-byte streaming stores reach memory bandwidth as wider ones do
// (the copy is bound by memory, not by instructions).
void stream_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  const std::size_t head = std::min<std::size_t>((16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16, n);
  std::memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; dst += 64, src += 64, n -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  std::memcpy(dst, src, n);
  // Streaming stores are weakly ordered: without the fence a completion (or the pin's release, after which
  // the owner may reuse the memory) could become visible before the data.
  _mm_sfence();
}
#endif

}  // namespace

void copy_bytes(void* dst, const void* src, std::size_t n, bool streaming) noexcept {
#if defined(__x86_64__)
  if (streaming) return stream_copy(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
#endif
  (void)streaming;
  std::memcpy(dst, src, n);
}

std::uint64_t streaming_threshold() noexcept {
  static const std::uint64_t from_cache = cache_threshold();
  const std::uint64_t forced = threshold_override.load(std::memory_order_relaxed);
  return forced ? forced : from_cache;
}

bool streams(std::uint64_t total) noexcept { return total >= streaming_threshold(); }

namespace testing {
void set_streaming_threshold(std::uint64_t bytes) noexcept {
  threshold_override.store(bytes, std::memory_order_relaxed);
}
}  // namespace testing

}  // namespace rdmakit::detail
