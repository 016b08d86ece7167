// The registration cache's bookkeeping (no device: handles are plain pointers).
#include <gtest/gtest.h>

#include "transport/verbs/reg_cache.hpp"

namespace rdmakit::verbs_impl {
namespace {

using namespace std::chrono_literals;
const Access kRw = Access::LocalWrite | Access::RemoteWrite;
int handle_a, handle_b;

TEST(VerbsRegCache, SameAndCoveredRangesHit) {
  RegistrationCache cache(true);
  EXPECT_EQ(cache.acquire(0x1000, 0x1000, kRw), nullptr);
  const auto* e = cache.insert(0x1000, 0x1000, kRw, &handle_a, 11, 12, 5us);
  EXPECT_EQ(cache.acquire(0x1000, 0x1000, kRw), e) << "same range";
  EXPECT_EQ(cache.acquire(0x1800, 0x100, kRw), e) << "covered range";
  EXPECT_EQ(cache.acquire(0x1f00, 0x200, kRw), nullptr) << "sticks out";
  EXPECT_EQ(cache.acquire(0x1000, 0x1000, Access::LocalWrite), nullptr) << "other rights never share an rkey";
  auto s = cache.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.pinned_bytes, 0x1000u);
  EXPECT_EQ(s.registration_time, 5us);
}

TEST(VerbsRegCache, EntryGoesWithItsLastReference) {
  RegistrationCache cache(true);
  const auto* e = cache.insert(0x1000, 0x1000, kRw, &handle_a, 1, 2, 1us);
  ASSERT_EQ(cache.acquire(0x1000, 0x10, kRw), e);
  EXPECT_EQ(cache.release(e), nullptr) << "one reference left";
  EXPECT_EQ(cache.release(e), &handle_a) << "last reference: deregister";
  EXPECT_EQ(cache.acquire(0x1000, 0x10, kRw), nullptr) << "a freed range is never a hit";
  auto s = cache.stats();
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.deregistrations, 1u);
}

TEST(VerbsRegCache, FindsCoveringEntryAmongMany) {
  RegistrationCache cache(true);
  const auto* big = cache.insert(0x0, 0x100000, kRw, &handle_a, 1, 2, 1us);
  for (std::uint64_t i = 1; i < 50; ++i) cache.insert(i * 0x1000, 0x10, kRw, &handle_b, 3, 4, 1us);
  EXPECT_EQ(cache.acquire(0x80000, 0x1000, kRw), big);
  EXPECT_EQ(cache.acquire(0x5000, 0x10, kRw)->lkey, 3u) << "the nearest covering entry";
}

TEST(VerbsRegCache, DisabledNeverShares) {
  RegistrationCache cache(false);
  const auto* e = cache.insert(0x1000, 0x1000, kRw, &handle_a, 1, 2, 1us);
  EXPECT_EQ(cache.acquire(0x1000, 0x1000, kRw), nullptr);
  EXPECT_FALSE(cache.stats().enabled);
  EXPECT_EQ(cache.stats().pinned_bytes, 0x1000u);
  EXPECT_EQ(cache.release(e), &handle_a);
}

TEST(VerbsRegCache, ReleaseOfUnknownEntryIsHarmless) {
  RegistrationCache cache(true);
  RegistrationCache::Entry stranger;
  EXPECT_EQ(cache.release(&stranger), nullptr);
}

}  // namespace
}  // namespace rdmakit::verbs_impl
