// CompletionQueue: poll order, wait_for's stash, timeouts and concurrent waiters, through the in-memory
// queue of the software transports.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "core/soft_cq.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;

Completion completion(std::uint64_t id, Status status = Status::Success) {
  return Completion{.id = id, .status = status, .opcode = Opcode::Write, .connection = 1};
}

std::vector<std::uint64_t> drain(CompletionQueue& cq) {
  std::vector<std::uint64_t> ids;
  std::array<Completion, 7> batch;  // odd size: crosses the stash/queue boundary mid-batch
  while (std::size_t n = cq.poll(batch))
    for (std::size_t i = 0; i < n; ++i) ids.push_back(batch[i].id);
  return ids;
}

class CompletionQueueTest : public ::testing::TestWithParam<WaitMode> {
 protected:
  SoftCompletionQueue cq{GetParam(), 20us, 1 << 16};
};

TEST_P(CompletionQueueTest, OverflowPutsTheQueueInTheErrorState) {
  SoftCompletionQueue small{GetParam(), 20us, 3};
  for (std::uint64_t id = 1; id <= 3; ++id) small.push(completion(id));
  EXPECT_TRUE(small.health().has_value()) << "a full queue is not an overflowed one";
  small.push(completion(4));
  small.push(completion(5));
  auto health = small.health();
  ASSERT_FALSE(health.has_value());
  EXPECT_EQ(health.error().code(), Errc::ResourceExhausted);
  EXPECT_NE(health.error().message().find("depth of 3"), std::string::npos) << health.error().message();
  // What it held still comes out, in order; then waits report the error at once instead of timing out.
  EXPECT_EQ(drain(small), (std::vector<std::uint64_t>{1, 2, 3}));
  std::array<Completion, 4> out;
  auto start = std::chrono::steady_clock::now();
  auto waited = small.wait(out, 10s);
  ASSERT_FALSE(waited.has_value());
  EXPECT_EQ(waited.error().code(), Errc::ResourceExhausted);
  auto lost = small.wait_for(4, 10s);
  ASSERT_FALSE(lost.has_value());
  EXPECT_EQ(lost.error().code(), Errc::ResourceExhausted);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_P(CompletionQueueTest, PollIsOldestFirstAndNeverBlocks) {
  std::array<Completion, 4> out;
  EXPECT_EQ(cq.poll(out), 0u);
  for (std::uint64_t id = 1; id <= 10; ++id) cq.push(completion(id));
  EXPECT_EQ(drain(cq), (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(cq.poll(out), 0u);
}

TEST_P(CompletionQueueTest, WaitForStashesOthersInOrder) {
  for (std::uint64_t id = 1; id <= 40; ++id)
    cq.push(completion(id, id == 25 ? Status::RemoteAccess : Status::Success));
  auto found = cq.wait_for(25, 1s);
  ASSERT_TRUE(found.has_value()) << found.error().describe();
  EXPECT_EQ(found->id, 25u);
  EXPECT_EQ(found->status, Status::RemoteAccess);
  // Taken from the stash this time.
  auto early = cq.wait_for(3, 1s);
  ASSERT_TRUE(early.has_value());
  EXPECT_EQ(early->id, 3u);
  std::vector<std::uint64_t> expected;
  for (std::uint64_t id = 1; id <= 40; ++id)
    if (id != 25 && id != 3) expected.push_back(id);
  EXPECT_EQ(drain(cq), expected);
}

TEST_P(CompletionQueueTest, StashComesBeforeLaterCompletions) {
  for (std::uint64_t id = 1; id <= 5; ++id) cq.push(completion(id));
  ASSERT_TRUE(cq.wait_for(5, 1s).has_value());
  cq.push(completion(6));
  std::array<Completion, 8> out;
  auto got = cq.wait(out, 1s);
  ASSERT_TRUE(got.has_value());
  ASSERT_GE(*got, 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(out[i].id, i + 1);
}

TEST_P(CompletionQueueTest, WaitForTimesOutInBoundedTime) {
  cq.push(completion(1));
  auto start = std::chrono::steady_clock::now();
  auto missing = cq.wait_for(99, 30ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Errc::Timeout);
  EXPECT_GE(took, 30ms);
  EXPECT_LT(took, 2s);
  EXPECT_EQ(drain(cq), std::vector<std::uint64_t>{1});  // still there
}

TEST_P(CompletionQueueTest, WaitReturnsZeroAfterTimeoutAndRejectsEmptyOutput) {
  std::array<Completion, 2> out;
  auto got = cq.wait(out, 10ms);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, 0u);
  auto bad = cq.wait(std::span<Completion>(), 10ms);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), Errc::InvalidArgument);
}

TEST_P(CompletionQueueTest, WaitWakesWhenAProducerPushes) {
  std::thread producer([&] {
    std::this_thread::sleep_for(20ms);
    cq.push(completion(7));
  });
  std::array<Completion, 2> out;
  auto start = std::chrono::steady_clock::now();
  auto got = cq.wait(out, 5s);
  auto took = std::chrono::steady_clock::now() - start;
  producer.join();
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(*got, 1u);
  EXPECT_EQ(out[0].id, 7u);
  EXPECT_LT(took, 2s);
}

// A producer pushes while two threads wait for different ids: each gets its own, and everything else
// stays queued in the order it was pushed.
TEST_P(CompletionQueueTest, TwoWaitersAndAProducer) {
  constexpr std::uint64_t kCount = 3000;
  constexpr std::uint64_t kFirst = 1700, kSecond = 2900;
  std::atomic<bool> go{false};
  Result<Completion> first = std::unexpected(Error(Errc::Timeout, "not run"));
  Result<Completion> second = first;
  std::thread a([&] {
    while (!go) std::this_thread::yield();
    first = cq.wait_for(kFirst, 10s);
  });
  std::thread b([&] {
    while (!go) std::this_thread::yield();
    second = cq.wait_for(kSecond, 10s);
  });
  std::thread producer([&] {
    go = true;
    for (std::uint64_t id = 1; id <= kCount; ++id) {
      cq.push(completion(id));
      if (id % 64 == 0) std::this_thread::yield();
    }
  });
  producer.join();
  a.join();
  b.join();
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  ASSERT_TRUE(second.has_value()) << second.error().describe();
  EXPECT_EQ(first->id, kFirst);
  EXPECT_EQ(second->id, kSecond);
  std::vector<std::uint64_t> expected;
  for (std::uint64_t id = 1; id <= kCount; ++id)
    if (id != kFirst && id != kSecond) expected.push_back(id);
  auto rest = drain(cq);
  ASSERT_EQ(rest.size(), expected.size());
  EXPECT_EQ(rest, expected);
}

INSTANTIATE_TEST_SUITE_P(Modes, CompletionQueueTest,
                         ::testing::Values(WaitMode::Spin, WaitMode::Block, WaitMode::Hybrid),
                         [](const auto& info) {
                           return info.param == WaitMode::Spin    ? std::string("spin")
                                  : info.param == WaitMode::Block ? std::string("block")
                                                                  : std::string("hybrid");
                         });

}  // namespace
}  // namespace rdmakit
