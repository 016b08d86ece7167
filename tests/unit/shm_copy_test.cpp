// The copy of the shm transport and the shared collectives (core/copy.hpp): streaming and cached copies land
// every byte at any alignment and touch nothing around the range; and WRITE, READ and SEND through the
// transport land the same bytes when the operation takes the streaming path (threshold lowered, so small
// buffers reach it).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "core/copy.hpp"
#include "rdmakit/rdmakit.hpp"
#include "support/test_support.hpp"

using namespace std::chrono_literals;
using namespace rdmakit;

namespace {

constexpr std::byte kGuard{0xee};

// Copies `n` bytes from src+s_off to dst+d_off and checks the copy and the untouched bytes around it.
void check_copy(std::size_t n, std::size_t s_off, std::size_t d_off, bool streaming) {
  std::vector<std::byte> src(n + 128), dst(n + 128, kGuard);
  rdmakit::testing::fill_pattern(src.data() + s_off, n, static_cast<std::uint32_t>(n + s_off));
  detail::copy_bytes(dst.data() + d_off, src.data() + s_off, n, streaming);
  ASSERT_EQ(std::memcmp(dst.data() + d_off, src.data() + s_off, n), 0)
      << n << " bytes, offsets " << s_off << "/" << d_off << (streaming ? ", streaming" : "");
  for (std::size_t i = 0; i < d_off; ++i) ASSERT_EQ(dst[i], kGuard) << "byte " << i << " before the range";
  for (std::size_t i = d_off + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], kGuard) << "byte " << i << " after";
}

TEST(ShmCopy, EveryAlignmentAndLengthLands) {
  for (bool streaming : {false, true})
    for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 4096, 4099})
      for (std::size_t s_off = 0; s_off < 20; s_off += 3)
        for (std::size_t d_off = 0; d_off < 20; d_off += 1) check_copy(n, s_off, d_off, streaming);
  check_copy((3 << 20) + 5, 7, 9, true);
}

TEST(ShmCopy, ThresholdIsAtLeastACoreCacheAndCanBeLowered) {
  EXPECT_GE(detail::streaming_threshold(), std::uint64_t{1} << 20);
  EXPECT_FALSE(detail::streams(64 << 10));  // a 64 KiB operation never streams
  detail::testing::set_streaming_threshold(4096);
  EXPECT_TRUE(detail::streams(4096));
  EXPECT_FALSE(detail::streams(4095));
  detail::testing::set_streaming_threshold(0);
  EXPECT_FALSE(detail::streams(64 << 10));
}

struct Pair {
  std::shared_ptr<Context> a, b;
  std::shared_ptr<Connection> ab, ba;
};

Pair connect_pair() {
  Pair p;
  p.a = Context::open(Options{.transport = "shm"}).value();
  p.b = Context::open(Options{.transport = "shm"}).value();
  auto listener = p.b->listen().value();
  auto accepted = std::async(std::launch::async, [&] { return listener->accept(5s); });
  p.ab = p.a->connect(listener->address()).value();
  p.ba = accepted.get().value();
  return p;
}

void wait_ok(Connection& c, std::uint64_t id) {
  auto done = c.wait(id, 10s);
  ASSERT_TRUE(done.has_value()) << done.error().describe();
  ASSERT_EQ(done->status, Status::Success) << to_string(done->status);
}

class StreamingThreshold : public ::testing::Test {
 protected:
  void SetUp() override { detail::testing::set_streaming_threshold(4096); }
  void TearDown() override { detail::testing::set_streaming_threshold(0); }
};

// Sizes above the threshold at odd offsets, one of several chunks (the transport moves 1 MiB at a time).
TEST_F(StreamingThreshold, WriteAndReadLandAtOddOffsets) {
  Pair p = connect_pair();
  for (std::size_t size : {std::size_t{4097}, (std::size_t{2} << 20) + 77}) {
    auto local = p.a->allocate(size + 64, Access::All).value();
    auto remote = p.b->allocate(size + 64, Access::All).value();
    auto* remote_bytes = static_cast<std::byte*>(remote->data());
    std::memset(remote_bytes, 0xee, size + 64);
    rdmakit::testing::fill_pattern(static_cast<std::byte*>(local->data()) + 3, size, 11);
    wait_ok(*p.ab, p.ab->write(local->slice(3, size), remote->descriptor().at(5)).value());
    EXPECT_EQ(rdmakit::testing::find_pattern_mismatch(remote_bytes + 5, size, 11), size);
    for (std::size_t i : {std::size_t{0}, std::size_t{4}, size + 5, size + 63})
      EXPECT_EQ(remote_bytes[i], kGuard) << "WRITE of " << size << " touched byte " << i;

    auto back = p.a->allocate(size + 64, Access::All).value();
    wait_ok(*p.ab, p.ab->read(back->slice(1, size), remote->descriptor().at(5)).value());
    EXPECT_EQ(rdmakit::testing::find_pattern_mismatch(static_cast<std::byte*>(back->data()) + 1, size, 11),
              size);
  }
}

// Several local segments: the copy goes segment by segment, each streamed.
TEST_F(StreamingThreshold, ScatterGatherWriteAndSendLand) {
  Pair p = connect_pair();
  constexpr std::size_t kPiece = 5000;
  auto local = p.a->allocate(3 * kPiece + 64, Access::All).value();
  auto remote = p.b->allocate(3 * kPiece + 64, Access::All).value();
  auto* bytes = static_cast<std::byte*>(local->data());
  rdmakit::testing::fill_pattern(bytes, 3 * kPiece + 64, 5);
  // Out of order pieces: the remote gets piece 2, then 0, then 1.
  Segment sgl[] = {local->slice(2 * kPiece + 1, kPiece), local->slice(1, kPiece),
                   local->slice(kPiece + 1, kPiece)};
  WorkRequest write{.opcode = Opcode::Write, .local = sgl, .remote = remote->descriptor().at(7)};
  wait_ok(*p.ab, p.ab->post(std::span(&write, 1)).value());
  auto* landed = static_cast<std::byte*>(remote->data()) + 7;
  EXPECT_EQ(std::memcmp(landed, bytes + 2 * kPiece + 1, kPiece), 0);
  EXPECT_EQ(std::memcmp(landed + kPiece, bytes + 1, kPiece), 0);
  EXPECT_EQ(std::memcmp(landed + 2 * kPiece, bytes + kPiece + 1, kPiece), 0);

  auto inbox = p.b->allocate(3 * kPiece + 64, Access::All).value();
  auto receive = p.ba->post_recv(inbox->slice(3, 3 * kPiece)).value();
  WorkRequest send{.opcode = Opcode::Send, .local = sgl};
  wait_ok(*p.ab, p.ab->post(std::span(&send, 1)).value());
  wait_ok(*p.ba, receive);
  EXPECT_EQ(std::memcmp(static_cast<std::byte*>(inbox->data()) + 3, landed, 3 * kPiece), 0);
}

// Resident bytes of this process's mappings of shm arenas (/proc/self/smaps: a mapping's header line starts
// with its address, its fields with a capitalised name).
std::uint64_t arena_resident_bytes() {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool arena = false;
  std::uint64_t kib = 0;
  while (std::getline(smaps, line)) {
    if (line.empty()) continue;
    if (std::isxdigit(static_cast<unsigned char>(line[0])) &&
        !std::isupper(static_cast<unsigned char>(line[0])))
      arena = line.find("rdmakit-shm-arena") != std::string::npos;
    else if (arena && line.rfind("Rss:", 0) == 0)
      kib += std::stoull(line.substr(4));
  }
  return kib << 10;
}

// The first access to a peer's region maps all of its existing pages into the initiator's page tables, as
// a NIC's registration does, so later operations take no page fault per page (4 KiB WRITEs walking 256 MiB
// spent a third of their time in them): after one 8-byte WRITE to a 4 MiB region, this process's mappings
// of shm arenas hold at least the region's size more than before (the initiator's mapping of the peer's
// arena is its own, apart from the owner's).
TEST(ShmPopulate, TheFirstAccessMapsThePeersWholeRegion) {
  Pair p = connect_pair();
  constexpr std::size_t kRegion = std::size_t{4} << 20;
  auto remote = p.b->allocate(kRegion, Access::All).value();
  std::memset(remote->data(), 1, kRegion);  // the owner's pages exist
  auto local = p.a->allocate(4096, Access::All).value();
  std::memset(local->data(), 2, 4096);
  const std::uint64_t before = arena_resident_bytes();
  wait_ok(*p.ab, p.ab->write(local->slice(0, 8), remote->descriptor().at(kRegion / 2)).value());
  EXPECT_GE(arena_resident_bytes() - before, kRegion);
  EXPECT_EQ(static_cast<std::byte*>(remote->data())[kRegion / 2], std::byte{2});

  // Only pages the owner has: a region nobody touched stays sparse (the WRITE makes its one page).
  auto sparse = p.b->allocate(kRegion, Access::All).value();
  const std::uint64_t before_sparse = arena_resident_bytes();
  wait_ok(*p.ab, p.ab->write(local->slice(0, 8), sparse->descriptor().at(kRegion / 2)).value());
  EXPECT_LT(arena_resident_bytes() - before_sparse, std::uint64_t{64} << 10);
  EXPECT_EQ(static_cast<std::byte*>(sparse->data())[kRegion / 2], std::byte{2});
}

}  // namespace
