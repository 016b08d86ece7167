// RemoteRegion: the descriptor that travels to peers, and its rejection of bytes that are not one.
#include <gtest/gtest.h>

#include <string>

#include "rdmakit/memory.hpp"

namespace rdmakit {
namespace {

RemoteRegion sample() {
  return RemoteRegion{.addr = 0x00007f12'3456'7890ull,
                      .length = (std::uint64_t{5} << 32) + 17,
                      .rkey = 0xdeadbeef,
                      .access = Access::RemoteRead | Access::RemoteWrite | Access::LocalWrite,
                      .owner_id = 0x0123'4567'89ab'cdefull,
                      .owner_epoch = 0xfedc'ba98'7654'3210ull};
}

void expect_same(const RemoteRegion& a, const RemoteRegion& b) {
  EXPECT_EQ(a.addr, b.addr);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.access, b.access);
  EXPECT_EQ(a.owner_id, b.owner_id);
  EXPECT_EQ(a.owner_epoch, b.owner_epoch);
}

TEST(Descriptor, SerializeRoundTrip) {
  auto bytes = sample().serialize();
  static_assert(sizeof(bytes) == RemoteRegion::kSerializedSize);
  auto back = RemoteRegion::deserialize(bytes);
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  expect_same(*back, sample());
}

TEST(Descriptor, ExtremeValuesRoundTrip) {
  RemoteRegion region{.addr = ~0ull,
                      .length = ~0ull,
                      .rkey = ~0u,
                      .access = Access::All,
                      .owner_id = ~0ull,
                      .owner_epoch = ~0ull};
  auto back = RemoteRegion::deserialize(region.serialize());
  ASSERT_TRUE(back.has_value());
  expect_same(*back, region);
  auto zero = RemoteRegion::deserialize(RemoteRegion{}.serialize());
  ASSERT_TRUE(zero.has_value());
  expect_same(*zero, RemoteRegion{});
}

TEST(Descriptor, HexRoundTripAnyCase) {
  std::string hex = sample().to_hex();
  EXPECT_EQ(hex.size(), 2 * RemoteRegion::kSerializedSize);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  auto back = RemoteRegion::from_hex(hex);
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  expect_same(*back, sample());
  for (char& c : hex) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto upper = RemoteRegion::from_hex(hex);
  ASSERT_TRUE(upper.has_value());
  expect_same(*upper, sample());
}

TEST(Descriptor, RejectsWrongSize) {
  auto bytes = sample().serialize();
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{47}}) {
    auto r = RemoteRegion::deserialize(std::span(bytes).first(size));
    ASSERT_FALSE(r.has_value()) << size;
    EXPECT_EQ(r.error().code(), Errc::InvalidArgument);
    EXPECT_NE(r.error().message().find("48"), std::string::npos) << r.error().message();
  }
  std::array<std::byte, RemoteRegion::kSerializedSize + 1> longer{};
  std::copy(bytes.begin(), bytes.end(), longer.begin());
  EXPECT_FALSE(RemoteRegion::deserialize(longer).has_value());
}

TEST(Descriptor, RejectsBadMagicVersionAndAccessBits) {
  auto bytes = sample().serialize();
  auto magic = bytes;
  magic[0] ^= std::byte{1};
  auto r = RemoteRegion::deserialize(magic);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("magic"), std::string::npos) << r.error().message();

  auto version = bytes;
  version[4] = std::byte{2};  // version is the 16-bit field after the magic
  r = RemoteRegion::deserialize(version);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("version"), std::string::npos) << r.error().message();

  auto access = bytes;
  access[6] = std::byte{0x10};  // a bit beyond Access::All
  r = RemoteRegion::deserialize(access);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("access"), std::string::npos) << r.error().message();

  std::array<std::byte, RemoteRegion::kSerializedSize> zeros{};
  EXPECT_FALSE(RemoteRegion::deserialize(zeros).has_value());
}

// Found by tests/fuzz/descriptor_fuzz.cpp (kept in tests/fuzz/regressions/descriptor/): the reserved word was
// read and dropped, so two different byte strings decoded to one descriptor.
TEST(Descriptor, RejectsNonzeroReservedBits) {
  auto bytes = sample().serialize();
  for (std::size_t i = 12; i < 16; ++i) {  // the 32-bit reserved field after the rkey
    auto reserved = bytes;
    reserved[i] = std::byte{0xff};
    auto r = RemoteRegion::deserialize(reserved);
    ASSERT_FALSE(r.has_value()) << "byte " << i;
    EXPECT_NE(r.error().message().find("reserved"), std::string::npos) << r.error().message();
    auto hex = RemoteRegion::from_hex(sample().to_hex().replace(2 * i, 2, "ff"));
    EXPECT_FALSE(hex.has_value()) << "byte " << i;
  }
}

TEST(Descriptor, RejectsBadHex) {
  std::string hex = sample().to_hex();
  EXPECT_FALSE(RemoteRegion::from_hex("").has_value());
  EXPECT_FALSE(RemoteRegion::from_hex(hex.substr(1)).has_value());
  EXPECT_FALSE(RemoteRegion::from_hex(hex + "0").has_value());
  EXPECT_FALSE(RemoteRegion::from_hex(hex + "00").has_value());
  for (char bad : {'g', 'x', ' ', '-', '\0'}) {
    std::string broken = hex;
    broken[10] = bad;
    auto r = RemoteRegion::from_hex(broken);
    ASSERT_FALSE(r.has_value()) << int(bad);
    EXPECT_EQ(r.error().code(), Errc::InvalidArgument);
  }
  std::string not_descriptor(2 * RemoteRegion::kSerializedSize, '0');
  EXPECT_FALSE(RemoteRegion::from_hex(not_descriptor).has_value());
}

TEST(Descriptor, AtAddsOffsetAndCarriesKeyAndEpoch) {
  auto remote = sample().at(4096);
  EXPECT_EQ(remote.addr, sample().addr + 4096);
  EXPECT_EQ(remote.rkey, sample().rkey);
  EXPECT_EQ(remote.owner_epoch, sample().owner_epoch);
  EXPECT_EQ(sample().at().addr, sample().addr);
}

}  // namespace
}  // namespace rdmakit
