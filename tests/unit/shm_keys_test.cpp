// The shm transport's memory keys (shm/registry.hpp): drawn like tcp's from one KeySource (random, never
// issued twice in a context's life), an lkey differs from its rkey and is never valid as one, and a key
// at any stride from a known one (the old keys were (generation << 14) | slot: 0x4001 apart) opens
// nothing. The conformance suite's KeyGuessing cases try the same over connections.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "transport/shm/registry.hpp"

namespace rdmakit::shm {
namespace {

constexpr std::uint64_t kBase = 0x100000, kSize = 4096;

struct Table {
  std::unique_ptr<ControlSegment> control = std::make_unique<ControlSegment>();
  Registry registry{control.get()};
};

TEST(ShmKeys, LocalAndRemoteKeysDifferAndAreNeverReused) {
  Table t;
  std::set<std::uint32_t> seen;
  for (int round = 0; round < 2000; ++round) {  // register and release: slots are reused, keys never
    auto keys = t.registry.add(kBase, kSize, Access::All);
    ASSERT_TRUE(keys) << keys.error().describe();
    ASSERT_NE(keys->lkey, keys->rkey);
    ASSERT_NE(keys->lkey, 0u);
    ASSERT_NE(keys->rkey, 0u);
    ASSERT_TRUE(seen.insert(keys->lkey).second) << "lkey issued twice, round " << round;
    ASSERT_TRUE(seen.insert(keys->rkey).second) << "rkey issued twice, round " << round;
    t.registry.revoke(keys->rkey);
    t.registry.release(keys->rkey);
  }
}

TEST(ShmKeys, AnLkeyIsNeverValidAsAnRkeyNorTheOtherWayRound) {
  Table t;
  auto keys = t.registry.add(kBase, kSize, Access::All).value();
  EXPECT_EQ(check_remote(*t.control, keys.rkey, kBase, 8, Access::RemoteWrite), Status::Success);
  EXPECT_EQ(check_remote(*t.control, keys.lkey, kBase, 8, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(t.registry.check_own(keys.lkey, kBase, 8, Access::RemoteAtomic), Status::RemoteAccess);
  EXPECT_EQ(t.registry.check_local(Segment{kBase, 8, keys.lkey}, true), Status::Success);
  EXPECT_EQ(t.registry.check_local(Segment{kBase, 8, keys.rkey}, true), Status::LocalProtection);
  for (std::size_t i = 0; i < sizeof(t.control->slot) / sizeof(t.control->slot[0]); ++i)
    ASSERT_NE(t.control->slot[i].key.load(), keys.lkey) << "the lkey is published where peers read";
  t.registry.revoke(keys.rkey);
  EXPECT_EQ(t.registry.check_local(Segment{kBase, 8, keys.lkey}, true), Status::LocalProtection);
  EXPECT_EQ(check_remote(*t.control, keys.rkey, kBase, 8, Access::RemoteWrite), Status::RemoteAccess);
}

// cuda-ipc (layout.hpp, DeviceSlot): a device region's IPC handle is published for peers only when the region
// grants a remote right; a local-only one keeps it in the private table (a receive posted in it hands it to
// that one peer), and a slot reused for host memory publishes no trace of the device region before it.
TEST(ShmKeys, ADeviceHandleIsPublishedOnlyForRegionsThatGrantARemoteRight) {
  Table t;
  DeviceRef device{.base = kBase - 4096,
                   .size = 3 * kSize,
                   .flags = kDeviceMemory | kDeviceHandle,
                   .device = 1,
                   .handle = {}};
  for (std::size_t i = 0; i < sizeof(device.handle); ++i) device.handle[i] = static_cast<char>(i + 1);
  auto has_handle = [](const DeviceRef& ref) {
    for (char c : ref.handle)
      if (c != 0) return true;
    return false;
  };
  for (Access access : {Access::LocalWrite, Access::LocalWrite | Access::RemoteRead}) {
    const bool remote = access != Access::LocalWrite;
    SCOPED_TRACE(to_string(access));
    auto keys = t.registry.add(kBase, kSize, access, &device).value();
    const DeviceRef& shared = t.control->device[keys.rkey & (kSlots - 1)];
    EXPECT_EQ(shared.flags & kDeviceMemory, kDeviceMemory);
    EXPECT_EQ((shared.flags & kDeviceHandle) != 0, remote);
    EXPECT_EQ(has_handle(shared), remote) << "the handle of a local-only region reached the shared table";
    const DeviceRef* mine = nullptr;
    ASSERT_EQ(t.registry.check_local(Segment{kBase, 8, keys.lkey}, true, &mine), Status::Success);
    ASSERT_NE(mine, nullptr);
    EXPECT_TRUE(has_handle(*mine));
    EXPECT_TRUE(t.registry.is_device(keys.rkey));
    t.registry.revoke(keys.rkey);
    t.registry.release(keys.rkey);
    // The next registration takes the same slot (the free list is a stack): host memory, no device trace.
    auto host = t.registry.add(kBase, kSize, Access::All).value();
    ASSERT_EQ(host.rkey & (kSlots - 1), keys.rkey & (kSlots - 1));
    EXPECT_EQ(shared.flags, 0u);
    EXPECT_FALSE(has_handle(shared));
    EXPECT_FALSE(t.registry.is_device(host.rkey));
    t.registry.revoke(host.rkey);
    t.registry.release(host.rkey);
  }
}

TEST(ShmKeys, KeysAtAnyStrideFromAKnownOneOpenNothing) {
  Table t;
  std::vector<Registry::Keys> regions;
  for (std::uint64_t i = 0; i < 64; ++i)
    regions.push_back(t.registry.add(kBase + kSize * i, kSize, Access::All).value());
  std::set<std::uint32_t> valid;
  for (auto& r : regions) valid.insert(r.rkey);
  int opened = 0;
  for (std::size_t known = 0; known < 4; ++known)
    for (std::uint32_t stride : {1u, 0x100u, 0x4000u, 0x4001u, 0x10000u, 0x8000u}) {
      for (std::int64_t k = -64; k <= 64; ++k) {
        auto guess = regions[known].rkey + static_cast<std::uint32_t>(k * stride);
        if (k == 0) continue;
        for (std::uint64_t i = 0; i < regions.size(); ++i)
          opened +=
              check_remote(*t.control, guess, kBase + kSize * i, 8, Access::RemoteRead) == Status::Success;
      }
    }
  EXPECT_EQ(opened, 0) << "a key at a stride from a known rkey opened a region";
  // Neighbouring registrations' rkeys are not one stride apart either (the old rule made them so).
  std::set<std::uint32_t> differences;
  for (std::size_t i = 1; i < regions.size(); ++i) differences.insert(regions[i].rkey - regions[i - 1].rkey);
  EXPECT_GT(differences.size(), regions.size() / 2) << "rkeys follow a pattern";
}

}  // namespace
}  // namespace rdmakit::shm
