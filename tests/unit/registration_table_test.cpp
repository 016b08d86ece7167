// RegistrationTable and check_registration: keys, bounds (hostile values included), rights, pins.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <set>
#include <thread>

#include "core/registration_table.hpp"
#include "core/soft_region.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

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
  auto key = table.add(base, 4096, Access::All);
  EXPECT_EQ(remote(table, key, base, 4096, Access::RemoteWrite), Status::Success);
  EXPECT_EQ(remote(table, key, base + 4095, 1, Access::RemoteWrite), Status::Success);
  EXPECT_EQ(remote(table, key, base + 4096, 0, Access::RemoteWrite), Status::Success);  // empty, at the end
  EXPECT_EQ(remote(table, key, base - 1, 1, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key, base + 1, 4096, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key, base + 4096, 1, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key, base + 4097, 0, Access::RemoteWrite), Status::RemoteAccess);
}

TEST(RegistrationTable, HostileValuesDoNotWrapAround) {
  RegistrationTable table;
  const std::uint64_t base = 0x10000;
  auto key = table.add(base, 4096, Access::All);
  EXPECT_EQ(remote(table, key, kMax, 1, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key, kMax - 10, 20, Access::RemoteRead), Status::RemoteAccess);  // addr+len wraps to small
  EXPECT_EQ(remote(table, key, base, kMax, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(remote(table, key, base + 8, kMax - 7, Access::RemoteRead), Status::RemoteAccess);  // wraps to base
  EXPECT_EQ(remote(table, key, 0, base + 16, Access::RemoteRead), Status::RemoteAccess);

  // A region at the very top of the address space.
  auto top = table.add(kMax - 100, 100, Access::All);
  EXPECT_EQ(remote(table, top, kMax - 100, 100, Access::RemoteRead), Status::Success);
  EXPECT_EQ(remote(table, top, kMax - 50, 51, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(remote(table, top, kMax - 50, kMax, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(table.check_local(Segment{kMax - 1, 0xffffffffu, top}, false), Status::LocalProtection);
}

TEST(RegistrationTable, RightsAndUnknownKeys) {
  RegistrationTable table;
  auto read_only = table.add(0x1000, 64, Access::RemoteRead);
  auto writable = table.add(0x2000, 64, Access::LocalWrite | Access::RemoteWrite);
  EXPECT_EQ(remote(table, read_only, 0x1000, 8, Access::RemoteRead), Status::Success);
  EXPECT_EQ(remote(table, read_only, 0x1000, 8, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(remote(table, read_only, 0x1000, 8, Access::RemoteAtomic), Status::RemoteAccess);
  EXPECT_EQ(remote(table, writable, 0x2000, 8, Access::RemoteWrite), Status::Success);
  EXPECT_EQ(remote(table, writable, 0x2000, 8, Access::RemoteRead), Status::RemoteAccess);
  // A key is for its own region only.
  EXPECT_EQ(remote(table, writable, 0x1000, 8, Access::RemoteWrite), Status::RemoteAccess);
  for (std::uint32_t unknown : {0u, read_only + writable + 12345u, 0xffffffffu}) {
    if (unknown != read_only && unknown != writable) {
      EXPECT_EQ(remote(table, unknown, 0x1000, 8, Access::RemoteRead), Status::RemoteAccess) << unknown;
    }
  }

  EXPECT_EQ(table.check_local(Segment{0x1000, 64, read_only}, false), Status::Success);
  EXPECT_EQ(table.check_local(Segment{0x1000, 64, read_only}, true), Status::LocalProtection);  // no LocalWrite
  EXPECT_EQ(table.check_local(Segment{0x2000, 64, writable}, true), Status::Success);
  EXPECT_EQ(table.check_local(Segment{0x2001, 64, writable}, false), Status::LocalProtection);
  EXPECT_EQ(table.check_local(Segment{0x2000, 8, 0}, false), Status::LocalProtection);
}

TEST(RegistrationTable, KeysAreNonzeroUniqueAndNotReused) {
  RegistrationTable table;
  std::set<std::uint32_t> keys;
  for (int i = 0; i < 1000; ++i) {
    auto key = table.add(0x1000 + 64 * static_cast<std::uint64_t>(i), 64, Access::RemoteRead);
    EXPECT_NE(key, 0u);
    EXPECT_TRUE(keys.insert(key).second);
    if (i % 2) table.remove(key);
  }
  auto removed = *std::next(keys.begin());
  table.remove(removed);
  table.remove(removed);  // twice: harmless
  EXPECT_EQ(remote(table, removed, 0x1000, 1, Access::RemoteRead), Status::RemoteAccess);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(keys.contains(table.add(0x9000, 8, Access::None)));
}

// A pinned region (a peer's access under way) is not removed under the access's feet.
TEST(RegistrationTable, RemoveWaitsForPins) {
  RegistrationTable table;
  auto key = table.add(0x4000, 128, Access::LocalWrite | Access::RemoteWrite);
  RegistrationTable::Pin pin;
  ASSERT_EQ(table.check_remote(key, 0x4000, 128, Access::RemoteWrite, &pin), Status::Success);
  ASSERT_TRUE(pin);
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    table.remove(key);
    removed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(removed.load()) << "remove() returned while the region was pinned";
  // New accesses no longer find it even before the pin goes.
  EXPECT_EQ(remote(table, key, 0x4000, 8, Access::RemoteWrite), Status::RemoteAccess);
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
  EXPECT_TRUE(check_registration(buffer, sizeof(buffer), Access::LocalWrite | Access::RemoteWrite).has_value());
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

}  // namespace
}  // namespace rdmakit
