// The pure checks of what a peer sends: the handshake's first message, receive completions and atomic
// requests from the shared rings, and the allow-list option. (The fuzz targets in tests/fuzz run the same
// functions on random bytes.)
#include <gtest/gtest.h>

#include <cstring>

#include "transport/shm/handshake.hpp"
#include "transport/shm/layout.hpp"
#include "transport/shm/records.hpp"
#include "transport/shm/socket.hpp"

using namespace rdmakit;
using namespace rdmakit::shm;

namespace {

Hello valid_hello(std::uint32_t role) {
  Hello hello{.magic = kControlMagic,
              .version = kVersion,
              .role = role,
              .epoch = 1,
              .id = 2,
              .rw_arena_base = 1ull << 40,
              .rw_arena_size = 1ull << 30,
              .ro_arena_base = 1ull << 41,
              .ro_arena_size = 1ull << 30,
              .control_size = sizeof(ControlSegment),
              .link_size = sizeof(LinkSegment)};
  std::memset(hello.name, 'n', sizeof(hello.name));  // not terminated: decoding terminates it
  return hello;
}

Result<Hello> decode(const Hello& hello, std::uint32_t role) {
  return decode_hello(std::as_bytes(std::span(&hello, 1)), role);
}

}  // namespace

TEST(ShmRecords, HelloChecks) {
  auto ok = decode(valid_hello(1), 1);
  ASSERT_TRUE(ok.has_value()) << ok.error().describe();
  EXPECT_EQ(std::strlen(ok->name), sizeof(ok->name) - 1);
  EXPECT_EQ(decode(valid_hello(0), 1).error().code(), Errc::ProtocolError);  // wrong role
  Hello bad = valid_hello(1);
  bad.version = kVersion - 1;
  EXPECT_EQ(decode(bad, 1).error().code(), Errc::ProtocolError);
  bad = valid_hello(1);
  bad.ro_arena_size = 4097;
  EXPECT_NE(decode(bad, 1).error().message().find("read-only arena"), std::string::npos);
  bad = valid_hello(1);
  bad.rw_arena_base = ~0ull - 10;
  EXPECT_NE(decode(bad, 1).error().message().find("writable arena"), std::string::npos);
  bad = valid_hello(1);
  bad.rw_arena_size = kMaxArenaSize * 2;
  EXPECT_FALSE(decode(bad, 1).has_value());
  std::byte shorter[40] = {};
  EXPECT_NE(decode_hello(shorter, 1).error().message().find("40 bytes"), std::string::npos);
}

TEST(ShmRecords, RefusalCarriesItsReason) {
  Refusal refusal{.magic = kRefusalMagic};
  std::memset(refusal.reason, 'r', sizeof(refusal.reason));  // not terminated
  auto got = decode_hello(std::as_bytes(std::span(&refusal, 1)), 1);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code(), Errc::ConnectionRefused);
  EXPECT_NE(got.error().message().find("refused us: rrr"), std::string::npos);
}

TEST(ShmRecords, ReceiveCompletionsAreCheckedAndCarryOurId) {
  PostedReceive posted{.id = 77, .capacity = 100};
  RecvDone done{.id = 12345, .bytes = 100, .status = 0, .opcode = static_cast<std::uint8_t>(Opcode::Recv)};
  auto completion = decode_recv_done(done, posted, 4);
  ASSERT_TRUE(completion.has_value());
  EXPECT_EQ(completion->id, 77u);  // ours, not the ring's
  EXPECT_EQ(completion->connection, 4u);
  done.bytes = 101;  // more than the receive holds
  EXPECT_FALSE(decode_recv_done(done, posted, 4).has_value());
  done.opcode = static_cast<std::uint8_t>(Opcode::RecvWriteImm);  // a WRITE's length may exceed it
  EXPECT_TRUE(decode_recv_done(done, posted, 4).has_value());
  done.opcode = static_cast<std::uint8_t>(Opcode::Write);
  EXPECT_FALSE(decode_recv_done(done, posted, 4).has_value());
  done.opcode = static_cast<std::uint8_t>(Opcode::Recv);
  done.bytes = 1;
  done.status = 200;
  EXPECT_FALSE(decode_recv_done(done, posted, 4).has_value());
}

TEST(ShmRecords, AtomicRequestsNeedAKnownOpcodeAndAlignment) {
  AtomicRequest request{};
  request.opcode = static_cast<std::uint64_t>(Opcode::FetchAdd);
  request.addr = 0x1000;
  EXPECT_EQ(validate_atomic(snapshot(request)), Status::Success);
  request.addr = 0x1004;
  EXPECT_EQ(validate_atomic(snapshot(request)), Status::RemoteInvalidRequest);
  request.addr = 0x1000;
  request.opcode = static_cast<std::uint64_t>(Opcode::Write);
  EXPECT_EQ(validate_atomic(snapshot(request)), Status::RemoteInvalidRequest);
}

TEST(ShmRecords, AllowedUidList) {
  EXPECT_TRUE(parse_uid_list("").value().empty());
  EXPECT_EQ(parse_uid_list("1000,0,65534").value(), (std::vector<uid_t>{1000, 0, 65534}));
  for (const char* bad : {"1000,", ",1", "a", "1 2", "4294967295", "99999999999"})
    EXPECT_EQ(parse_uid_list(bad).error().code(), Errc::InvalidArgument) << bad;
}
