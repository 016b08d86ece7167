// The per-chunk checksum: every single-bit change is caught, and it is fast enough (prints GB/s).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "ckpt/checksum.hpp"
#include "ckpt/copy_pool.hpp"
#include "support/test_support.hpp"

namespace rdmakit::ckpt {
namespace {

TEST(CkptChecksum, EveryBitFlipChangesTheSum) {
  for (std::size_t size : {0u, 1u, 7u, 8u, 31u, 32u, 33u, 100u, 257u}) {
    std::vector<unsigned char> data(size);
    testing::fill_pattern(data.data(), size, static_cast<std::uint32_t>(size));
    auto base = checksum64(data.data(), size);
    for (std::size_t i = 0; i < size; ++i)
      for (int bit = 0; bit < 8; ++bit) {
        data[i] ^= static_cast<unsigned char>(1u << bit);
        EXPECT_NE(checksum64(data.data(), size), base) << "size " << size << " byte " << i << " bit " << bit;
        data[i] ^= static_cast<unsigned char>(1u << bit);
      }
  }
}

TEST(CkptChecksum, LengthAndSeedMatter) {
  std::vector<unsigned char> zeros(64, 0);
  EXPECT_NE(checksum64(zeros.data(), 63), checksum64(zeros.data(), 64));
  EXPECT_NE(checksum64(zeros.data(), 8), checksum64(zeros.data(), 16));
  EXPECT_NE(checksum64(zeros.data(), 64, 1), checksum64(zeros.data(), 64, 2));
  // Swapped words in different lanes are different data.
  std::vector<std::uint64_t> words{1, 2, 3, 4, 5, 6, 7, 8};
  auto before = checksum64(words.data(), 64);
  std::swap(words[0], words[1]);
  EXPECT_NE(checksum64(words.data(), 64), before);
}

// Measured, not asserted tightly (a shared 2-core machine): the rate is printed for bench/RESULTS.md.
TEST(CkptChecksum, ThroughputPrinted) {
  std::vector<unsigned char> data(64u << 20);
  testing::fill_pattern(data.data(), data.size(), 3);
  std::uint64_t sink = 0;
  auto start = std::chrono::steady_clock::now();
  int rounds = 8;
  for (int r = 0; r < rounds; ++r)
    sink += checksum64(data.data(), data.size(), static_cast<std::uint64_t>(r));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double gbps = static_cast<double>(data.size()) * rounds / seconds / 1e9;
  std::printf("checksum64: %.2f GB/s (one thread; sink %llx)\n", gbps,
              static_cast<unsigned long long>(sink & 1));
  EXPECT_GT(gbps, 0.5);  // far below the measured rate: catches an accidental -O0 or quadratic loop only
}

TEST(CkptCopyPlan, PartsCoverEveryByteOnce) {
  std::vector<unsigned char> a(10'000), b(1), c(50'000);
  testing::fill_pattern(a.data(), a.size(), 1);
  testing::fill_pattern(c.data(), c.size(), 2);
  b[0] = 0x5a;
  std::vector<detail::Span> spans{
      {a.data(), 0, a.size()}, {b.data(), 10'000, 1}, {c.data(), 10'001, c.size()}};
  std::uint64_t total = 60'001;
  for (std::size_t parts : {1u, 2u, 3u, 7u}) {
    std::vector<unsigned char> staging(total, 0);
    for (std::size_t p = 0; p < parts; ++p) detail::copy_part(spans, staging.data(), total, p, parts, true);
    EXPECT_EQ(testing::find_pattern_mismatch(staging.data(), a.size(), 1), a.size());
    EXPECT_EQ(staging[10'000], 0x5a);
    EXPECT_EQ(testing::find_pattern_mismatch(staging.data() + 10'001, c.size(), 2), c.size());
  }
  detail::CopyPool pool(3);
  std::vector<std::atomic<int>> hits(11);
  for (int round = 0; round < 100; ++round) pool.run(11, [&](std::size_t part) { ++hits[part]; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 100);
}

}  // namespace
}  // namespace rdmakit::ckpt
