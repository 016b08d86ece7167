// One-sided WRITE and READ: sizes, offsets, scatter-gather, ordering.
#include <cstring>

#include "conformance/fixture.hpp"

namespace rdmakit::conformance {
namespace {

using testing::fill_pattern;
using testing::find_pattern_mismatch;

constexpr std::size_t kMiB = 1024 * 1024;
constexpr std::size_t kGuard = 64;
// From nothing to 64 MiB, with sizes that straddle pages and socket buffers.
const std::vector<std::size_t> kSizes = {0, 1, 7, 8, 63, 4096, 65537, kMiB + 3, 16 * kMiB + 5, 64 * kMiB};

bool all_zero(const std::byte* data, std::size_t size) {
  return std::all_of(data, data + size, [](std::byte b) { return b == std::byte{0}; });
}

TEST_P(Conformance, WriteLandsExactlyAtOddOffsets) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  const std::size_t span = 64 * kMiB + 2 * kGuard;
  auto source = region(*client_.context, span, Access::LocalWrite);
  auto target = region(*server_.context, span, Access::LocalWrite | Access::RemoteWrite);
  ASSERT_TRUE(source && target);
  auto* dst = static_cast<std::byte*>(target->data());
  const std::uint64_t max_message = client_.context->capabilities().max_message_size;
  for (std::size_t size : kSizes) {
    if (max_message != 0 && size > max_message) continue;  // one message cannot carry it (rxe: 8 MiB)
    SCOPED_TRACE("size " + std::to_string(size));
    const std::size_t src_offset = 3, dst_offset = kGuard + 5;
    fill_pattern(static_cast<std::byte*>(source->data()) + src_offset, size,
                 static_cast<std::uint32_t>(size));
    std::memset(dst, 0, span);
    auto id = RDMAKIT_ASSERT_OK(client_.connection->write(
        source->slice(src_offset, static_cast<std::uint32_t>(size)), target->descriptor().at(dst_offset)));
    Completion done = wait(*client_.connection, id);
    ASSERT_EQ(done.status, Status::Success) << to_string(done.status);
    EXPECT_EQ(done.opcode, Opcode::Write);
    EXPECT_EQ(done.connection, client_.connection->number());
    ASSERT_EQ(find_pattern_mismatch(dst + dst_offset, size, static_cast<std::uint32_t>(size)), size);
    EXPECT_TRUE(all_zero(dst, dst_offset)) << "bytes before the target range changed";
    EXPECT_TRUE(all_zero(dst + dst_offset + size, span - dst_offset - size))
        << "bytes after the target range changed";
  }
}

TEST_P(Conformance, ReadFetchesExactlyAtOddOffsets) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  const std::size_t span = 64 * kMiB + 2 * kGuard;
  auto sink = region(*client_.context, span, Access::LocalWrite);
  auto source = region(*server_.context, span, Access::LocalWrite | Access::RemoteRead);
  ASSERT_TRUE(sink && source);
  auto* dst = static_cast<std::byte*>(sink->data());
  const std::uint64_t max_message = client_.context->capabilities().max_message_size;
  for (std::size_t size : kSizes) {
    if (max_message != 0 && size > max_message) continue;  // one message cannot carry it (rxe: 8 MiB)
    SCOPED_TRACE("size " + std::to_string(size));
    const std::size_t src_offset = 7, dst_offset = kGuard + 1;
    fill_pattern(static_cast<std::byte*>(source->data()) + src_offset, size,
                 static_cast<std::uint32_t>(size) + 1);
    std::memset(dst, 0, span);
    auto id = RDMAKIT_ASSERT_OK(client_.connection->read(
        sink->slice(dst_offset, static_cast<std::uint32_t>(size)), source->descriptor().at(src_offset)));
    Completion done = wait(*client_.connection, id);
    ASSERT_EQ(done.status, Status::Success) << to_string(done.status);
    EXPECT_EQ(done.opcode, Opcode::Read);
    EXPECT_EQ(done.bytes, size);
    ASSERT_EQ(find_pattern_mismatch(dst + dst_offset, size, static_cast<std::uint32_t>(size) + 1), size);
    EXPECT_TRUE(all_zero(dst, dst_offset));
    EXPECT_TRUE(all_zero(dst + dst_offset + size, span - dst_offset - size));
  }
}

TEST_P(Conformance, ScatterGatherWriteAndRead) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  auto a = region(*client_.context, 4096, Access::LocalWrite);
  auto b = region(*client_.context, 70000, Access::LocalWrite);
  auto target =
      region(*server_.context, 200000, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
  ASSERT_TRUE(a && b && target);
  fill_pattern(a->data(), 4096, 11);
  fill_pattern(b->data(), 70000, 12);
  // Gather three pieces (one of them empty) into one contiguous remote range.
  Segment gather[] = {a->slice(100, 1000), b->slice(0, 0), b->slice(5, 65000)};
  auto id = RDMAKIT_ASSERT_OK(client_.connection->write(gather, target->descriptor().at(9)));
  ASSERT_EQ(wait(*client_.connection, id).status, Status::Success);
  auto* remote = static_cast<const std::uint8_t*>(target->data()) + 9;
  EXPECT_EQ(std::memcmp(remote, static_cast<std::uint8_t*>(a->data()) + 100, 1000), 0);
  EXPECT_EQ(std::memcmp(remote + 1000, static_cast<std::uint8_t*>(b->data()) + 5, 65000), 0);

  // Scatter it back into four pieces.
  auto sink = region(*client_.context, 70000, Access::LocalWrite);
  ASSERT_TRUE(sink);
  Segment scatter[] = {sink->slice(0, 10), sink->slice(100, 990), sink->slice(2000, 60000),
                       sink->slice(65000, 5000)};
  id = RDMAKIT_ASSERT_OK(client_.connection->read(scatter, target->descriptor().at(9)));
  Completion done = wait(*client_.connection, id);
  ASSERT_EQ(done.status, Status::Success);
  EXPECT_EQ(done.bytes, 66000u);
  auto* s = static_cast<const std::uint8_t*>(sink->data());
  EXPECT_EQ(std::memcmp(s, remote, 10), 0);
  EXPECT_EQ(std::memcmp(s + 100, remote + 10, 990), 0);
  EXPECT_EQ(std::memcmp(s + 2000, remote + 1000, 60000), 0);
  EXPECT_EQ(std::memcmp(s + 65000, remote + 61000, 5000), 0);
}

TEST_P(Conformance, OperationsCompleteInPostOrderAndWritesPrecedeLaterSends) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  constexpr int kCount = 200;
  auto values = region(*client_.context, kCount * 8, Access::LocalWrite);
  auto message = region(*client_.context, 8, Access::LocalWrite);
  auto target = region(*server_.context, 8, Access::LocalWrite | Access::RemoteWrite);
  auto inbox = region(*server_.context, 8, Access::LocalWrite);
  ASSERT_TRUE(values && message && target && inbox);
  auto recv_id = RDMAKIT_ASSERT_OK(server_.connection->post_recv(inbox->whole().value()));
  auto* v = static_cast<std::uint64_t*>(values->data());
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < kCount; ++i) {
    v[i] = static_cast<std::uint64_t>(i + 1);
    // Every WRITE hits the same word: only in-order execution leaves the last value there.
    ids.push_back(
        RDMAKIT_ASSERT_OK(client_.connection->write(values->slice(i * 8, 8), target->descriptor().at(0))));
  }
  ids.push_back(RDMAKIT_ASSERT_OK(client_.connection->send(message->whole().value())));
  // The receive of the SEND completes only after every WRITE before it is visible.
  Completion received = wait(*server_.connection, recv_id);
  ASSERT_EQ(received.status, Status::Success);
  EXPECT_EQ(*static_cast<std::uint64_t*>(target->data()), static_cast<std::uint64_t>(kCount));
  // Completions come out of the queue in post order.
  std::vector<std::uint64_t> seen;
  Completion batch[32];
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (seen.size() < ids.size() && std::chrono::steady_clock::now() < deadline) {
    auto n = RDMAKIT_ASSERT_OK(client_.connection->send_cq().wait(batch, 1s));
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(batch[i].status, Status::Success);
      seen.push_back(batch[i].id);
    }
  }
  EXPECT_EQ(seen, ids);
}

TEST_P(Conformance, UnsignaledOperationsProduceNoCompletion) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  auto source = region(*client_.context, 64, Access::LocalWrite);
  auto target = region(*server_.context, 64, Access::LocalWrite | Access::RemoteWrite);
  ASSERT_TRUE(source && target);
  fill_pattern(source->data(), 64, 5);
  WorkRequest chain[4];
  Segment pieces[4];
  for (int i = 0; i < 4; ++i) {
    pieces[i] = source->slice(i * 16, 16);
    chain[i] = WorkRequest{.opcode = Opcode::Write,
                           .local = std::span(&pieces[i], 1),
                           .remote = target->descriptor().at(i * 16),
                           .signaled = i == 3};
  }
  auto first = RDMAKIT_ASSERT_OK(client_.connection->post(chain));
  Completion done = wait(*client_.connection, first + 3);  // a chain gets consecutive ids
  ASSERT_EQ(done.status, Status::Success);
  EXPECT_EQ(find_pattern_mismatch(target->data(), 64, 5), 64u);
  Completion extra[4];
  EXPECT_EQ(client_.connection->send_cq().poll(extra), 0u) << "an unsignaled operation produced a completion";
}

}  // namespace
}  // namespace rdmakit::conformance
