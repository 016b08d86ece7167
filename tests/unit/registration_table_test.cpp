// RegistrationTable and check_registration: keys, bounds (hostile values included), rights, pins.
#include "core/registration_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "core/key_source.hpp"
#include "core/soft_region.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

// Registers and returns both keys; a registration in these tests never fails.
RegistrationTable::Keys add(RegistrationTable& table, std::uint64_t addr, std::uint64_t length,
                            Access access) {
  auto keys = table.add(addr, length, access);
  EXPECT_TRUE(keys.has_value());
  return keys.value_or(RegistrationTable::Keys{0, 0});
}

Status remote(const RegistrationTable& table, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
              Access needed) {
  RegistrationTable::Pin pin;
  Status status = table.check_remote(key, addr, length, needed, &pin);
  EXPECT_EQ(static_cast<bool>(pin), status == Status::Success);
  return status;
}

TEST(RegistrationTable, BoundsAreInclusiveOfTheRegionOnly) {
  RegistrationTable table;
  const std::uint64_t base = 0x10000;
  auto key = add(table, base, 4096, Access::All);
  EXPECT_EQ(remote(table, key.rkey, base, 4096, Access::RemoteWrite), Status::Success);
  EXPECT_EQ(remote(table, key.rkey, base + 4095, 1, Access::RemoteWrite), Status::Success);
  EXPECT_EQ(remote(table, key.rkey, base + 4096, 0, Access::RemoteWrite),
            Status::Success);  // empty, at the end
  EXPECT_EQ(remote(table, key.rkey, base - 1, 1, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key.rkey, base + 1, 4096, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key.rkey, base + 4096, 1, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key.rkey, base + 4097, 0, Access::RemoteWrite), Status::RemoteAccess);
}

TEST(RegistrationTable, HostileValuesDoNotWrapAround) {
  RegistrationTable table;
  const std::uint64_t base = 0x10000;
  auto key = add(table, base, 4096, Access::All);
  EXPECT_EQ(remote(table, key.rkey, kMax, 1, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key.rkey, kMax - 10, 20, Access::RemoteRead),
            Status::RemoteAccess);  // addr+len wraps to small
  EXPECT_EQ(remote(table, key.rkey, base, kMax, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key.rkey, base + 8, kMax - 7, Access::RemoteRead),
            Status::RemoteAccess);  // wraps to base
  EXPECT_EQ(remote(table, key.rkey, 0, base + 16, Access::RemoteRead), Status::RemoteAccess);

  // A region at the very top of the address space.
  auto top = add(table, kMax - 100, 100, Access::All);
  EXPECT_EQ(remote(table, top.rkey, kMax - 100, 100, Access::RemoteRead), Status::Success);
  EXPECT_EQ(remote(table, top.rkey, kMax - 50, 51, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(remote(table, top.rkey, kMax - 50, kMax, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(table.check_local(Segment{kMax - 1, 0xffffffffu, top.lkey}, false), Status::LocalProtection);
}

TEST(RegistrationTable, RightsAndUnknownKeys) {
  RegistrationTable table;
  auto read_only = add(table, 0x1000, 64, Access::RemoteRead);
  auto writable = add(table, 0x2000, 64, Access::LocalWrite | Access::RemoteWrite);
  EXPECT_EQ(remote(table, read_only.rkey, 0x1000, 8, Access::RemoteRead), Status::Success);
  EXPECT_EQ(remote(table, read_only.rkey, 0x1000, 8, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, read_only.rkey, 0x1000, 8, Access::RemoteAtomic), Status::RemoteAccess);
  EXPECT_EQ(remote(table, writable.rkey, 0x2000, 8, Access::RemoteWrite), Status::Success);
  EXPECT_EQ(remote(table, writable.rkey, 0x2000, 8, Access::RemoteRead), Status::RemoteAccess);
  // A key is for its own region only.
  EXPECT_EQ(remote(table, writable.rkey, 0x1000, 8, Access::RemoteWrite), Status::RemoteAccess);
  for (std::uint32_t unknown : {0u, read_only.rkey + writable.rkey + 12345u, 0xffffffffu}) {
    if (unknown != read_only.rkey && unknown != writable.rkey) {
      EXPECT_EQ(remote(table, unknown, 0x1000, 8, Access::RemoteRead), Status::RemoteAccess) << unknown;
    }
  }

  EXPECT_EQ(table.check_local(Segment{0x1000, 64, read_only.lkey}, false), Status::Success);
  EXPECT_EQ(table.check_local(Segment{0x1000, 64, read_only.lkey}, true),
            Status::LocalProtection);  // no LocalWrite
  EXPECT_EQ(table.check_local(Segment{0x2000, 64, writable.lkey}, true), Status::Success);
  EXPECT_EQ(table.check_local(Segment{0x2001, 64, writable.lkey}, false), Status::LocalProtection);
  EXPECT_EQ(table.check_local(Segment{0x2000, 8, 0}, false), Status::LocalProtection);
}

TEST(RegistrationTable, KeysAreNonzeroUniqueAndNotReused) {
  RegistrationTable table;
  std::set<std::uint32_t> keys;
  std::vector<RegistrationTable::Keys> removed;
  for (int i = 0; i < 1000; ++i) {
    auto k = add(table, 0x1000 + 64 * static_cast<std::uint64_t>(i), 64, Access::RemoteRead);
    EXPECT_NE(k.lkey, 0u);
    EXPECT_NE(k.rkey, 0u);
    EXPECT_NE(k.lkey, k.rkey);
    EXPECT_TRUE(keys.insert(k.lkey).second);
    EXPECT_TRUE(keys.insert(k.rkey).second);
    if (i % 2) table.remove(k.lkey), removed.push_back(k);
  }
  table.remove(removed[0].lkey);  // twice: harmless
  EXPECT_EQ(remote(table, removed[0].rkey, 0x1000 + 64, 1, Access::RemoteRead), Status::RemoteAccess);
  for (int i = 0; i < 1000; ++i) {
    auto k = add(table, 0x9000, 8, Access::None);
    EXPECT_FALSE(keys.contains(k.lkey));
    EXPECT_FALSE(keys.contains(k.rkey));
  }
}

// An lkey is not an rkey, nor the other way round.
TEST(RegistrationTable, LocalAndRemoteKeysAreNotInterchangeable) {
  RegistrationTable table;
  auto k = add(table, 0x1000, 64, Access::All);
  EXPECT_EQ(remote(table, k.lkey, 0x1000, 8, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(table.check_local(Segment{0x1000, 8, k.rkey}, false), Status::LocalProtection);
  EXPECT_EQ(remote(table, k.rkey, 0x1000, 8, Access::RemoteRead), Status::Success);
  EXPECT_EQ(table.check_local(Segment{0x1000, 8, k.lkey}, false), Status::Success);
}

// Finding 8: keys were a+1, a+2, ... from one random start, so a peer given one rkey reached its
// neighbours' regions with rkey+1, rkey+2, ... Now no key near a known one opens any region.
TEST(RegistrationTable, NeighbouringKeysOpenNothing) {
  RegistrationTable table;
  std::vector<RegistrationTable::Keys> regions;
  for (std::uint64_t i = 0; i < 64; ++i)
    regions.push_back(add(table, 0x100000 + 4096 * i, 4096, Access::All));
  int opened = 0;
  for (std::size_t known = 0; known < 4; ++known)
    for (std::int64_t d = -1000; d <= 1000; ++d) {
      if (d == 0) continue;
      auto guess = static_cast<std::uint32_t>(static_cast<std::int64_t>(regions[known].rkey) + d);
      for (std::uint64_t i = 0; i < regions.size(); ++i)
        opened += remote(table, guess, 0x100000 + 4096 * i, 8, Access::RemoteRead) == Status::Success;
    }
  EXPECT_EQ(opened, 0) << "a key near a known rkey opened a region";
}

TEST(KeySource, IssuedSetGrowsAndRemembers) {
  IssuedKeys set;
  for (std::uint32_t k = 1; k <= 100000; ++k) set.insert(k * 7919u);
  EXPECT_EQ(set.size(), 100000u);
  for (std::uint32_t k = 1; k <= 100000; ++k) ASSERT_TRUE(set.contains(k * 7919u)) << k;
  EXPECT_FALSE(set.contains(7919u * 100001u));
  EXPECT_FALSE(set.contains(3));

  KeySource source;
  std::set<std::uint32_t> seen;
  for (int i = 0; i < 100000; ++i) {
    auto key = source.next();
    ASSERT_TRUE(key.has_value());
    ASSERT_NE(*key, 0u);
    ASSERT_TRUE(seen.insert(*key).second) << "key issued twice";
  }
  EXPECT_EQ(source.issued(), 100000u);
}

// A pinned region (a peer's access under way) is not removed under the access's feet.
TEST(RegistrationTable, RemoveWaitsForPins) {
  RegistrationTable table;
  auto key = add(table, 0x4000, 128, Access::LocalWrite | Access::RemoteWrite);
  RegistrationTable::Pin pin;
  ASSERT_EQ(table.check_remote(key.rkey, 0x4000, 128, Access::RemoteWrite, &pin), Status::Success);
  ASSERT_TRUE(pin);
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    table.remove(key.lkey);
    removed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(removed.load()) << "remove() returned while the region was pinned";
  // New accesses no longer find it even before the pin goes.
  EXPECT_EQ(remote(table, key.rkey, 0x4000, 8, Access::RemoteWrite), Status::RemoteAccess);
  RegistrationTable::Pin moved = std::move(pin);
  EXPECT_FALSE(pin);
  EXPECT_TRUE(moved);
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(removed.load());
  moved = RegistrationTable::Pin();  // released by move assignment
  auto start = std::chrono::steady_clock::now();
  remover.join();
  EXPECT_TRUE(removed.load());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST(CheckRegistration, VerbsRules) {
  char buffer[64] = {};
  EXPECT_TRUE(check_registration(buffer, sizeof(buffer), Access::None).has_value());
  EXPECT_TRUE(check_registration(buffer, sizeof(buffer), Access::RemoteRead).has_value());
  EXPECT_TRUE(
      check_registration(buffer, sizeof(buffer), Access::LocalWrite | Access::RemoteWrite).has_value());
  EXPECT_TRUE(check_registration(buffer, sizeof(buffer), Access::All).has_value());

  auto expect_rejected = [](Result<void> r, const char* fragment) {
    ASSERT_FALSE(r.has_value()) << fragment;
    EXPECT_EQ(r.error().code(), Errc::InvalidArgument);
    EXPECT_NE(r.error().message().find(fragment), std::string::npos) << r.error().message();
  };
  expect_rejected(check_registration(nullptr, 64, Access::RemoteRead), "null");
  expect_rejected(check_registration(buffer, 0, Access::RemoteRead), "size is 0");
  expect_rejected(check_registration(buffer, 64, Access::RemoteWrite), "LocalWrite");
  expect_rejected(check_registration(buffer, 64, Access::RemoteAtomic | Access::RemoteRead), "LocalWrite");
  expect_rejected(check_registration(buffer, 64, static_cast<Access>(16)), "access");
  // The pointer is never dereferenced: only the range is checked.
  auto* near_top = reinterpret_cast<void*>(std::numeric_limits<std::uintptr_t>::max() - 10);
  expect_rejected(check_registration(near_top, 100, Access::RemoteRead), "wraps");
}

TEST(KeySource, FixedBitsKeepTheRestRandomAndUnique) {
  KeySource source;
  std::set<std::uint32_t> seen;
  std::vector<std::uint32_t> slot_zero;  // in the order drawn
  for (int i = 0; i < 3000; ++i) {
    auto slot = static_cast<std::uint32_t>(i % 3);
    auto key = source.next(0x3fff, slot);
    ASSERT_TRUE(key.has_value()) << key.error().describe();
    ASSERT_EQ(*key & 0x3fff, slot);
    ASSERT_TRUE(seen.insert(*key).second) << "key issued twice";
    if (slot == 0) slot_zero.push_back(*key);
  }
  // The free bits carry the randomness: one slot's successive keys are no sequence (a generation counter
  // gives one step, 0x4000, every time).
  std::set<std::uint32_t> steps;
  for (std::size_t i = 1; i < slot_zero.size(); ++i) steps.insert(slot_zero[i] - slot_zero[i - 1]);
  EXPECT_GT(steps.size(), slot_zero.size() * 9 / 10);
}

}  // namespace
}  // namespace rdmakit
