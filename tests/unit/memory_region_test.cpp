// MemoryRegion's segments and RemoteRegion's addresses: a range that does not fit is an error, never a
// silently shortened segment. A Segment's length is ibv_sge's 32 bits, so a region of 4 GiB or more has no
// whole() (its memory here is reserved address space: registration over tcp does not touch the pages).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include "rdmakit/context.hpp"

namespace rdmakit {
namespace {

constexpr std::uint64_t k4GiB = std::uint64_t{1} << 32;

class Reserved {
 public:
  explicit Reserved(std::size_t size)
      : size_(size),
        data_(mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)) {}
  ~Reserved() {
    if (data_ != MAP_FAILED) munmap(data_, size_);
  }
  Reserved(const Reserved&) = delete;
  Reserved& operator=(const Reserved&) = delete;
  void* data() const { return data_ == MAP_FAILED ? nullptr : data_; }

 private:
  std::size_t size_;
  void* data_;
};

std::shared_ptr<MemoryRegion> register_reserved(Context& context, const Reserved& memory, std::size_t size) {
  auto region = context.register_memory(memory.data(), size, Access::LocalWrite);
  EXPECT_TRUE(region.has_value()) << region.error().describe();
  return region ? *region : nullptr;
}

TEST(MemoryRegion, WholeOfFourGiBOrMoreIsAnErrorNotATruncatedSegment) {
  auto context = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(context.has_value()) << context.error().describe();
  Reserved memory(k4GiB + 4096);
  ASSERT_NE(memory.data(), nullptr);
  for (std::uint64_t size : {k4GiB, k4GiB + 1, k4GiB + 4096}) {
    auto region = register_reserved(**context, memory, size);
    ASSERT_TRUE(region);
    auto whole = region->whole();
    ASSERT_FALSE(whole.has_value()) << "whole() of " << size << " bytes gave length " << whole->length;
    EXPECT_EQ(whole.error().code(), Errc::InvalidArgument);
    EXPECT_NE(whole.error().message().find("do not fit one Segment"), std::string::npos)
        << whole.error().message();
    // The largest segment there is, and the last bytes of the region, are fine.
    auto largest = region->segment(0, kMaxSegmentLength);
    ASSERT_TRUE(largest.has_value()) << largest.error().describe();
    EXPECT_EQ(largest->length, 0xffffffffu);
    auto tail = region->segment(size - 16, 16);
    ASSERT_TRUE(tail.has_value()) << tail.error().describe();
    EXPECT_EQ(tail->addr, reinterpret_cast<std::uint64_t>(memory.data()) + size - 16);
    EXPECT_EQ(tail->lkey, region->lkey());
  }
  auto just_below = register_reserved(**context, memory, k4GiB - 1);
  ASSERT_TRUE(just_below);
  auto whole = just_below->whole();
  ASSERT_TRUE(whole.has_value()) << whole.error().describe();
  EXPECT_EQ(whole->length, 0xffffffffu);
  EXPECT_EQ(whole->addr, reinterpret_cast<std::uint64_t>(memory.data()));
}

TEST(MemoryRegion, SegmentsOutsideTheRegionAreErrors) {
  auto context = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(context.has_value()) << context.error().describe();
  auto region = (*context)->allocate(64, Access::LocalWrite);
  ASSERT_TRUE(region.has_value()) << region.error().describe();
  EXPECT_EQ((*region)->whole()->length, 64u);
  EXPECT_EQ((*region)->segment(64, 0)->length, 0u);
  EXPECT_EQ((*region)->segment(8, 56)->addr, reinterpret_cast<std::uint64_t>((*region)->data()) + 8);
  for (auto [offset, length] : {std::pair<std::uint64_t, std::uint64_t>{0, 65},
                                {60, 8},
                                {65, 0},
                                {~std::uint64_t{0}, 2},
                                {8, ~std::uint64_t{0} - 4}}) {
    auto segment = (*region)->segment(offset, length);
    ASSERT_FALSE(segment.has_value()) << offset << " + " << length;
    EXPECT_EQ(segment.error().code(), Errc::InvalidArgument);
    EXPECT_NE(segment.error().message().find("outside the region of 64 bytes"), std::string::npos)
        << segment.error().message();
  }
}

TEST(RemoteRegion, AtWithALengthIsBoundsChecked) {
  RemoteRegion region{.addr = 0x10000,
                      .length = 4096,
                      .rkey = 7,
                      .access = Access::RemoteWrite,
                      .owner_id = 1,
                      .owner_epoch = 9};
  auto inside = region.at(4000, 96);
  ASSERT_TRUE(inside.has_value()) << inside.error().describe();
  EXPECT_EQ(inside->addr, 0x10000u + 4000);
  EXPECT_EQ(inside->rkey, 7u);
  EXPECT_EQ(inside->owner_epoch, 9u);
  EXPECT_TRUE(region.at(4096, 0).has_value());
  EXPECT_TRUE(region.at(0, 4096).has_value());
  for (auto [offset, length] : {std::pair<std::uint64_t, std::uint64_t>{4000, 97},
                                {4097, 0},
                                {0, 4097},
                                {~std::uint64_t{0}, 1},
                                {1, ~std::uint64_t{0}}}) {
    auto at = region.at(offset, length);
    ASSERT_FALSE(at.has_value()) << offset << " + " << length;
    EXPECT_EQ(at.error().code(), Errc::InvalidArgument);
    EXPECT_NE(at.error().message().find("outside the region of 4096 bytes"), std::string::npos)
        << at.error().message();
  }
  // The unchecked form stays what it was: the target checks, as a NIC does.
  EXPECT_EQ(region.at(1 << 20).addr, 0x10000u + (1 << 20));
}

}  // namespace
}  // namespace rdmakit
