// The verbs handshake: encoding, decoding, and negotiation with diagnostics that name the parameter.
#include <gtest/gtest.h>

#include "transport/verbs/handshake.hpp"

namespace rdmakit::verbs_impl {
namespace {

Hello sample(std::uint32_t qpn) {
  Hello h;
  h.mtu = IBV_MTU_1024;
  h.port_mtu = IBV_MTU_1024;
  h.context_id = 0x0102030405060708ull;
  h.epoch = 0xfedcba9876543210ull;
  h.gid = Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 7, 1};
  h.lid = 0x1234;
  h.qpn = qpn;
  h.psn = 0xabcdef;
  h.timeout = 16;
  h.retry_cnt = 7;
  h.rnr_timer = 28;
  h.rnr_retry = 6;
  h.max_rd_atomic = 16;
  return h;
}

TEST(VerbsHandshake, EncodeDecodeRoundTrip) {
  Hello h = sample(0x11);
  h.mtu_explicit = true;
  h.rejected = true;
  auto bytes = h.encode();
  static_assert(Hello::kSize <= 56, "must fit IB CM REQ private data after rdma_cm's header");
  auto back = Hello::decode(bytes);
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->encode(), bytes);
  EXPECT_EQ(back->qpn, 0x11u);
  EXPECT_EQ(back->psn, 0xabcdefu);
  EXPECT_EQ(back->epoch, h.epoch);
  EXPECT_EQ(back->context_id, h.context_id);
  EXPECT_EQ(back->gid, h.gid);
  EXPECT_EQ(back->lid, 0x1234);
  EXPECT_TRUE(back->mtu_explicit);
  EXPECT_TRUE(back->rejected);
  EXPECT_EQ(back->rnr_timer, 28);
}

TEST(VerbsHandshake, DecodeAcceptsPaddingAndRejectsGarbage) {
  auto bytes = sample(5).encode();
  std::vector<std::byte> padded(bytes.begin(), bytes.end());
  padded.resize(196);  // the CM pads private data with zeros
  EXPECT_TRUE(Hello::decode(padded));

  auto short_data = Hello::decode(std::span(bytes).first(20));
  ASSERT_FALSE(short_data);
  EXPECT_EQ(short_data.error().code(), Errc::ProtocolError);

  auto bad_magic = bytes;
  bad_magic[0] = std::byte{0};
  EXPECT_NE(Hello::decode(bad_magic).error().message().find("magic"), std::string::npos);

  auto other_version = bytes;
  other_version[4] = std::byte{9};
  auto v = Hello::decode(other_version);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("version"), std::string::npos);

  auto bad_mtu = bytes;
  bad_mtu[6] = std::byte{42};
  EXPECT_FALSE(Hello::decode(bad_mtu));
}

TEST(VerbsHandshake, MtuFollowsTheSmallerPortUnlessSet) {
  Hello a = sample(1), b = sample(2);
  a.port_mtu = a.mtu = IBV_MTU_4096;
  b.port_mtu = b.mtu = IBV_MTU_1024;
  auto ab = negotiate(a, b), ba = negotiate(b, a);
  ASSERT_TRUE(ab && ba);
  EXPECT_EQ(ab->mtu, IBV_MTU_1024);
  EXPECT_EQ(ba->mtu, IBV_MTU_1024);

  a.mtu = IBV_MTU_512;
  a.mtu_explicit = true;
  EXPECT_EQ(negotiate(a, b)->mtu, IBV_MTU_512) << "an explicit MTU that fits wins on both sides";
  EXPECT_EQ(negotiate(b, a)->mtu, IBV_MTU_512);
}

TEST(VerbsHandshake, ExplicitMtuMismatchNamesTheParameter) {
  Hello a = sample(1), b = sample(2);
  a.mtu_explicit = b.mtu_explicit = true;
  a.mtu = IBV_MTU_1024;
  b.mtu = IBV_MTU_512;
  auto ab = negotiate(a, b);
  ASSERT_FALSE(ab);
  EXPECT_EQ(ab.error().code(), Errc::ConnectionRefused);
  EXPECT_NE(ab.error().message().find("mtu mismatch"), std::string::npos) << ab.error().message();
  EXPECT_NE(ab.error().message().find("1024"), std::string::npos);
  EXPECT_NE(ab.error().message().find("512"), std::string::npos);
  EXPECT_NE(ab.error().message().find("RDMAKIT_MTU"), std::string::npos);
  EXPECT_FALSE(negotiate(b, a)) << "the other side refuses too";
}

TEST(VerbsHandshake, ExplicitMtuAbovePeersPortIsRefused) {
  Hello a = sample(1), b = sample(2);
  a.mtu_explicit = true;
  a.mtu = a.port_mtu = IBV_MTU_4096;
  b.mtu = b.port_mtu = IBV_MTU_1024;
  auto ab = negotiate(a, b);
  ASSERT_FALSE(ab);
  EXPECT_NE(ab.error().message().find("supports only 1024"), std::string::npos) << ab.error().message();
  auto ba = negotiate(b, a);
  ASSERT_FALSE(ba);
  EXPECT_NE(ba.error().message().find("mtu"), std::string::npos);
}

TEST(VerbsHandshake, MissingGidOrQpnIsRefused) {
  Hello a = sample(1), b = sample(2);
  b.gid = Gid{};
  EXPECT_NE(negotiate(a, b).error().message().find("gid"), std::string::npos);
  b = sample(0);
  EXPECT_NE(negotiate(a, b).error().message().find("qpn"), std::string::npos);
}

TEST(VerbsHandshake, ReadAtomicDepthIsTheSmaller) {
  Hello a = sample(1), b = sample(2);
  a.max_rd_atomic = 16;
  b.max_rd_atomic = 4;
  EXPECT_EQ(negotiate(a, b)->max_rd_atomic, 4);
  EXPECT_EQ(negotiate(b, a)->max_rd_atomic, 4);
}

}  // namespace
}  // namespace rdmakit::verbs_impl
