// Atomics: old values returned, and exact results under contention from many connections.
#include <thread>

#include "conformance/fixture.hpp"

namespace rdmakit::conformance {
namespace {

TEST_P(Conformance, CompareSwapAndFetchAddReturnTheOldValue) {
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  auto result = region(*client_.context, 8, Access::LocalWrite);
  auto word = region(*server_.context, 64, Access::LocalWrite | Access::RemoteAtomic | Access::RemoteRead);
  ASSERT_TRUE(result && word);
  auto* remote = static_cast<std::uint64_t*>(word->data()) + 3;
  auto* old = static_cast<std::uint64_t*>(result->data());
  *remote = 100;
  auto target = word->descriptor().at(24);

  auto id = RDMAKIT_ASSERT_OK(client_.connection->fetch_add(result->whole().value(), target, 5));
  Completion done = wait(*client_.connection, id);
  ASSERT_EQ(done.status, Status::Success);
  EXPECT_EQ(done.opcode, Opcode::FetchAdd);
  EXPECT_EQ(*old, 100u);
  EXPECT_EQ(*remote, 105u);

  id = RDMAKIT_ASSERT_OK(
      client_.connection->compare_swap(result->whole().value(), target, 999, 1));  // mismatch
  ASSERT_EQ(wait(*client_.connection, id).status, Status::Success);
  EXPECT_EQ(*old, 105u);
  EXPECT_EQ(*remote, 105u) << "a failed compare must not swap";

  id = RDMAKIT_ASSERT_OK(
      client_.connection->compare_swap(result->whole().value(), target, 105, 0xdeadbeefcafef00dull));
  ASSERT_EQ(wait(*client_.connection, id).status, Status::Success);
  EXPECT_EQ(*old, 105u);
  EXPECT_EQ(*remote, 0xdeadbeefcafef00dull);

  // Wrap-around is modulo 2^64.
  id = RDMAKIT_ASSERT_OK(
      client_.connection->fetch_add(result->whole().value(), target, ~0xdeadbeefcafef00dull + 2));
  ASSERT_EQ(wait(*client_.connection, id).status, Status::Success);
  EXPECT_EQ(*remote, 1u);
}

TEST_P(Conformance, AtomicsSumExactlyUnderContentionFromEightConnections) {
  constexpr int kConnections = 8, kAddsEach = 300, kSwapsEach = 50;
  server_.context = open_context(true);
  ASSERT_TRUE(server_.context);
  auto counters = region(*server_.context, 16, Access::LocalWrite | Access::RemoteAtomic);
  ASSERT_TRUE(counters);
  auto* words = static_cast<std::uint64_t*>(counters->data());
  std::vector<Endpoint> clients(kConnections), servers(kConnections);
  for (int i = 0; i < kConnections; ++i) {
    servers[i].context = server_.context;
    connect_pair(clients[i], servers[i]);
    ASSERT_TRUE(clients[i].connection);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kConnections; ++i) {
    threads.emplace_back([&, i] {
      auto result = clients[i].context->allocate(8, Access::LocalWrite);
      if (!result) return void(failures++);
      auto& connection = *clients[i].connection;
      // Windows of 10 outstanding adds, so the target sees real interleaving between connections.
      for (int k = 0; k < kAddsEach; k += 10) {
        std::uint64_t last = 0;
        for (int j = 0; j < 10; ++j) {
          auto id = connection.fetch_add((*result)->whole().value(), counters->descriptor().at(0),
                                         static_cast<std::uint64_t>(i + 1));
          if (!id) return void(failures++);
          last = *id;
        }
        Completion batch[10];
        std::size_t got = 0;
        while (got < 10) {
          auto n = connection.send_cq().wait(std::span(batch + got, 10 - got), kWait);
          if (!n || *n == 0) return void(failures++);
          for (std::size_t m = got; m < got + *n; ++m)
            if (!batch[m].ok()) failures++;
          got += *n;
        }
        if (batch[9].id != last) failures++;
      }
      // A CAS-based increment: retry until our compare wins.
      auto* old = static_cast<std::uint64_t*>((*result)->data());
      for (int k = 0; k < kSwapsEach; ++k) {
        std::uint64_t expected = 0;
        for (;;) {
          auto id = connection.compare_swap((*result)->whole().value(), counters->descriptor().at(8),
                                            expected, expected + 1);
          if (!id) return void(failures++);
          auto done = connection.wait(*id, kWait);
          if (!done || !done->ok()) return void(failures++);
          if (*old == expected) break;
          expected = *old;
        }
      }
    });
  }
  // The owner's CPU hits the same word at the same time.
  std::atomic_ref<std::uint64_t> local(words[0]);
  for (int k = 0; k < 1000; ++k) local.fetch_add(1000);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::uint64_t expected_sum = 1000ull * 1000;
  for (int i = 0; i < kConnections; ++i) expected_sum += static_cast<std::uint64_t>(i + 1) * kAddsEach;
  EXPECT_EQ(std::atomic_ref<std::uint64_t>(words[0]).load(), expected_sum);
  EXPECT_EQ(std::atomic_ref<std::uint64_t>(words[1]).load(),
            static_cast<std::uint64_t>(kConnections * kSwapsEach));
}

}  // namespace
}  // namespace rdmakit::conformance
