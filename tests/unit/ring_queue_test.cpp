// RingQueue: the FIFO behind the tcp and shm posting paths. Order must survive growth and wrap-around,
// and clear() must let go of what elements own (a pinned registration, for tcp's frames).
#include "core/ring_queue.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace rdmakit {
namespace {

TEST(RingQueue, KeepsOrderAcrossWrapAroundAndGrowth) {
  RingQueue<int> queue;
  int next_in = 0, next_out = 0;
  // Push three, pop two, so the head walks round the ring while it grows from 16 to 64 slots.
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 3; ++i) queue.push_back(next_in++);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(queue.front(), next_out++);
      queue.pop_front();
    }
    ASSERT_EQ(queue.size(), static_cast<std::size_t>(next_in - next_out));
    for (std::size_t i = 0; i < queue.size(); ++i) ASSERT_EQ(queue[i], next_out + static_cast<int>(i));
  }
  while (!queue.empty()) {
    ASSERT_EQ(queue.front(), next_out++);
    queue.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
}

TEST(RingQueue, EmplaceBackGivesAFreshElementInAReusedSlot) {
  RingQueue<int> queue;
  queue.push_back(7);
  queue.pop_front();
  EXPECT_EQ(queue.emplace_back(), 0);  // the slot held 7
}

TEST(RingQueue, ClearReleasesWhatElementsAndFreeSlotsHold) {
  auto owned = std::make_shared<int>(1);
  RingQueue<std::shared_ptr<int>> queue;
  for (int i = 0; i < 20; ++i) queue.push_back(owned);
  queue.pop_front();  // a popped slot still holds its copy until it is reused...
  EXPECT_EQ(owned.use_count(), 21);
  queue.clear();  // ...and clear() lets go of it too
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(owned.use_count(), 1);
}

}  // namespace
}  // namespace rdmakit
