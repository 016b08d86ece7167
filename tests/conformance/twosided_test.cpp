// SEND/RECV matching and WRITE with immediate.
#include <cstring>

#include "conformance/fixture.hpp"

namespace rdmakit::conformance {
namespace {

using testing::fill_pattern;
using testing::find_pattern_mismatch;

TEST_P(Conformance, SendsMatchPostedReceivesInOrder) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  const std::vector<std::uint32_t> sizes = {0, 1, 100, 4096, 300000};
  auto out = region(*client_.context, 300000, Access::LocalWrite);
  auto in = region(*server_.context, 5 * 300000, Access::LocalWrite);
  ASSERT_TRUE(out && in);
  std::vector<std::uint64_t> recv_ids;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    recv_ids.push_back(RDMAKIT_ASSERT_OK(server_.connection->post_recv(in->slice(i * 300000, 300000))));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    fill_pattern(out->data(), sizes[i], static_cast<std::uint32_t>(i));
    auto id = i == 2 ? client_.connection->send_imm(out->slice(0, sizes[i]), 0xfeedbeef)
                     : client_.connection->send(out->slice(0, sizes[i]));
    ASSERT_TRUE(id.has_value()) << id.error().describe();
    ASSERT_EQ(wait(*client_.connection, *id).status, Status::Success);
    Completion received = wait(*server_.connection, recv_ids[i]);
    ASSERT_EQ(received.status, Status::Success) << to_string(received.status);
    EXPECT_EQ(received.opcode, Opcode::Recv);
    EXPECT_EQ(received.bytes, sizes[i]);
    EXPECT_EQ(received.has_imm, i == 2);
    if (i == 2) {
      EXPECT_EQ(received.imm, 0xfeedbeefu);
    }
    EXPECT_EQ(find_pattern_mismatch(static_cast<std::byte*>(in->data()) + i * 300000, sizes[i],
                                    static_cast<std::uint32_t>(i)),
              sizes[i]);
  }
}

TEST_P(Conformance, ReceiveScattersIntoSeveralSegments) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  auto out = region(*client_.context, 10000, Access::LocalWrite);
  auto in = region(*server_.context, 20000, Access::LocalWrite);
  ASSERT_TRUE(out && in);
  fill_pattern(out->data(), 10000, 3);
  Segment pieces[] = {in->slice(0, 1000), in->slice(5000, 3000), in->slice(12000, 8000)};
  auto recv_id = RDMAKIT_ASSERT_OK(server_.connection->post_recv(pieces));
  RDMAKIT_ASSERT_OK(client_.connection->send(out->whole().value()));
  Completion received = wait(*server_.connection, recv_id);
  ASSERT_EQ(received.status, Status::Success);
  EXPECT_EQ(received.bytes, 10000u);
  auto* o = static_cast<const std::uint8_t*>(out->data());
  auto* i = static_cast<const std::uint8_t*>(in->data());
  EXPECT_EQ(std::memcmp(i, o, 1000), 0);
  EXPECT_EQ(std::memcmp(i + 5000, o + 1000, 3000), 0);
  EXPECT_EQ(std::memcmp(i + 12000, o + 4000, 6000), 0);
}

TEST_P(Conformance, WriteWithImmediateConsumesAReceiveAndCarriesTheValue) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  auto source = region(*client_.context, 65536, Access::LocalWrite);
  auto target = region(*server_.context, 65536, Access::LocalWrite | Access::RemoteWrite);
  auto unused = region(*server_.context, 16, Access::LocalWrite);
  ASSERT_TRUE(source && target && unused);
  fill_pattern(source->data(), 65536, 77);
  auto recv_id = RDMAKIT_ASSERT_OK(server_.connection->post_recv(unused->whole().value()));
  auto id = RDMAKIT_ASSERT_OK(
      client_.connection->write_imm(source->slice(0, 40000), target->descriptor().at(100), 42));
  Completion sent = wait(*client_.connection, id);
  ASSERT_EQ(sent.status, Status::Success);
  EXPECT_EQ(sent.opcode, Opcode::WriteImm);
  Completion received = wait(*server_.connection, recv_id);
  ASSERT_EQ(received.status, Status::Success);
  EXPECT_EQ(received.opcode, Opcode::RecvWriteImm);
  EXPECT_TRUE(received.has_imm);
  EXPECT_EQ(received.imm, 42u);
  EXPECT_EQ(received.bytes, 40000u);
  // The data is visible when the receive completes.
  EXPECT_EQ(find_pattern_mismatch(static_cast<std::byte*>(target->data()) + 100, 40000, 77), 40000u);
}

TEST_P(Conformance, SendWaitsForAReceivePostedLate) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  auto out = region(*client_.context, 64, Access::LocalWrite);
  auto in = region(*server_.context, 64, Access::LocalWrite);
  ASSERT_TRUE(out && in);
  fill_pattern(out->data(), 64, 9);
  auto id = RDMAKIT_ASSERT_OK(client_.connection->send(out->whole().value()));
  // Well inside rnr_timeout (300 ms): the sender retries until the receive is there.
  std::this_thread::sleep_for(50ms);
  auto recv_id = RDMAKIT_ASSERT_OK(server_.connection->post_recv(in->whole().value()));
  EXPECT_EQ(wait(*client_.connection, id).status, Status::Success);
  EXPECT_EQ(wait(*server_.connection, recv_id).status, Status::Success);
  EXPECT_EQ(find_pattern_mismatch(in->data(), 64, 9), 64u);
}

TEST_P(Conformance, SendSucceedsEvenWhenTheReceiverClosesRightAfterReceiving) {
  // RC acknowledges a message no later than its receive completes: a receiver that closes (or exits)
  // as soon as it has the message must not make the sender's SEND fail.
  for (int round = 0; round < 20; ++round) {
    Endpoint client, server;
    client.context = client_.context;
    server.context = server_.context;
    connect_pair(client, server);
    ASSERT_TRUE(client.connection);
    client_.context = client.context;
    server_.context = server.context;
    auto out = region(*client.context, 8, Access::LocalWrite);
    auto in = region(*server.context, 8, Access::LocalWrite);
    ASSERT_TRUE(out && in);
    auto recv_id = RDMAKIT_ASSERT_OK(server.connection->post_recv(in->whole().value()));
    auto id = RDMAKIT_ASSERT_OK(client.connection->send(out->whole().value()));
    ASSERT_EQ(wait(*server.connection, recv_id).status, Status::Success);
    server.connection->close();
    EXPECT_EQ(wait(*client.connection, id).status, Status::Success) << "round " << round;
  }
}

}  // namespace
}  // namespace rdmakit::conformance
