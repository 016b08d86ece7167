// Ranks that disagree (issue 24): a collective called with another count, type, operator or root on one
// rank, a rank that closes its communicator while the others are inside a collective, and a rank that
// aborts (its process exits on an error). Every rank must fail, fast, with an error naming the cause,
// instead of returning wrong numbers or waiting for the collective timeout. Threads as ranks, over shm
// (the shared-memory path) and tcp (the staged algorithms).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <set>

#include "coll/signature.hpp"
#include "coll_harness.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::testing {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Call;
using detail::CallKind;

// The collective timeout is 30 s: anything that ends within a few seconds was detected, not timed out.
constexpr auto kFast = std::chrono::seconds(5);

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CollSignature, EveryArgumentChangesTheSignatureAndTheKindTypeAndOpDecode) {
  Call base{CallKind::Allreduce, DataType::F32, ReduceOp::Sum, 10, -1};
  std::uint32_t sig = detail::signature(base);
  std::set<std::uint32_t> seen{sig};
  for (Call other : {Call{CallKind::Allreduce, DataType::F32, ReduceOp::Sum, 11, -1},
                     Call{CallKind::Allreduce, DataType::F64, ReduceOp::Sum, 10, -1},
                     Call{CallKind::Allreduce, DataType::I32, ReduceOp::Sum, 10, -1},
                     Call{CallKind::Allreduce, DataType::F32, ReduceOp::Max, 10, -1},
                     Call{CallKind::Reduce, DataType::F32, ReduceOp::Sum, 10, 0},
                     Call{CallKind::Reduce, DataType::F32, ReduceOp::Sum, 10, 1}, Call{CallKind::Barrier},
                     Call{CallKind::Close}, Call{CallKind::Setup},
                     Call{CallKind::Allreduce, DataType::F32, ReduceOp::Sum, 10 + (1u << 20) - 1, -1},
                     Call{CallKind::Allreduce, DataType::F32, ReduceOp::Sum, 10ull << 32, -1}})
    EXPECT_TRUE(seen.insert(detail::signature(other)).second) << detail::describe(detail::signature(other));
  EXPECT_EQ(detail::describe(sig), "allreduce of f32 (sum)");
  EXPECT_EQ(detail::describe(detail::signature(Call{CallKind::Allgather, DataType::U8})), "allgather of u8");
  std::string why = detail::mismatch(
      base, detail::signature(Call{CallKind::Allreduce, DataType::F64, ReduceOp::Sum, 10, -1}), 1);
  EXPECT_TRUE(contains(why,
                       "rank 1 called allreduce of f64 (sum) where this rank called allreduce of f32 "
                       "(sum), 10 elements"))
      << why;
  why = detail::mismatch(base, detail::signature(Call{CallKind::Allreduce, DataType::F32, ReduceOp::Sum, 11}),
                         1);
  EXPECT_TRUE(contains(why, "with another element count")) << why;
}

class CollMismatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto probe = Context::open(Options{.transport = GetParam()});
    if (!probe) GTEST_SKIP() << GetParam() << " transport unavailable: " << probe.error().describe();
  }
};

// Rank `odd` calls with `theirs`, the others with `mine`; every rank must fail within kFast with an
// InvalidArgument whose message contains `words` (the ranks that detect it) or names the disagreement.
void expect_every_rank_fails(int n, const std::string& transport, int odd,
                             const std::function<Result<void>(Communicator&, bool odd)>& call,
                             const std::vector<std::string>& words) {
  std::mutex mutex;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  // Every rank created before any calls: a rank told of the mismatch while still in create() fails there.
  std::latch created(n);
  run_ranks(n, small_chunks(transport), [&](Communicator& comm) {
    created.arrive_and_wait();
    auto began = Clock::now();
    auto result = call(comm, comm.rank() == odd);
    auto took = Clock::now() - began;
    ASSERT_FALSE(result.has_value()) << "rank " << comm.rank() << " returned without an error";
    EXPECT_LT(took, kFast) << result.error().describe();
    EXPECT_EQ(result.error().code(), Errc::InvalidArgument) << result.error().describe();
    // Clearly broken afterwards: the next collective fails at once with the same cause.
    int x = 1;
    EXPECT_FALSE(comm.allreduce(&x, &x, 1, DataType::I32, ReduceOp::Sum).has_value());
    std::lock_guard lock(mutex);
    errors[static_cast<std::size_t>(comm.rank())] = result.error().message();
  });
  bool detailed = false;
  for (int r = 0; r < n; ++r) {
    const std::string& e = errors[static_cast<std::size_t>(r)];
    bool all = std::all_of(words.begin(), words.end(), [&](const std::string& w) { return contains(e, w); });
    detailed = detailed || all;
    EXPECT_TRUE(all || contains(e, "the ranks that found it name both calls")) << "rank " << r << ": " << e;
  }
  EXPECT_TRUE(detailed) << "no rank named both calls";
}

TEST_P(CollMismatch, AllreduceOfAnotherCountFailsEveryRank) {
  for (int n : {2, 4})
    expect_every_rank_fails(n, GetParam(), 1,
                            [](Communicator& comm, bool odd) {
                              std::vector<float> data(odd ? 11 : 10, 1.0f);
                              return comm.allreduce(data.data(), data.data(), data.size(), DataType::F32,
                                                    ReduceOp::Sum);
                            },
                            {"allreduce of f32 (sum)", "another element count"});
}

TEST_P(CollMismatch, AllreduceOfAnotherTypeOrOperatorFailsEveryRank) {
  expect_every_rank_fails(2, GetParam(), 0,
                          [](Communicator& comm, bool odd) {
                            std::vector<double> data(10, 1.0);  // room for 10 of either type
                            return comm.allreduce(data.data(), data.data(), 10,
                                                  odd ? DataType::F64 : DataType::F32, ReduceOp::Sum);
                          },
                          {"allreduce of f64 (sum)", "allreduce of f32 (sum)"});
  expect_every_rank_fails(3, GetParam(), 2,
                          [](Communicator& comm, bool odd) {
                            std::vector<int> data(10, 1);
                            return comm.allreduce(data.data(), data.data(), 10, DataType::I32,
                                                  odd ? ReduceOp::Max : ReduceOp::Sum);
                          },
                          {"allreduce of i32 (max)", "allreduce of i32 (sum)"});
}

TEST_P(CollMismatch, OtherCollectivesAndRootsFailEveryRank) {
  expect_every_rank_fails(3, GetParam(), 1,
                          [](Communicator& comm, bool odd) {
                            std::vector<float> data(3 * 8, 1.0f);
                            return odd ? comm.allgather(data.data(), data.data() + 8, 8, DataType::F32)
                                       : comm.reduce_scatter(data.data(), data.data(), 8, DataType::F32,
                                                             ReduceOp::Sum);
                          },
                          {"allgather of f32", "reduce_scatter of f32 (sum)"});
  expect_every_rank_fails(2, GetParam(), 1,
                          [](Communicator& comm, bool odd) {
                            std::vector<float> data(8, 1.0f);
                            return odd ? comm.barrier()
                                       : comm.allreduce(data.data(), data.data(), 8, DataType::F32,
                                                        ReduceOp::Sum);
                          },
                          {"barrier", "allreduce of f32 (sum)"});
  expect_every_rank_fails(2, GetParam(), 1,
                          [](Communicator& comm, bool odd) {
                            std::vector<float> data(8, 1.0f);
                            // Two roots: both send, nobody receives;
                            // the next collective finds the chunks.
                            auto sent =
                                comm.broadcast(data.data(), data.data(), 8, DataType::F32, odd ? 1 : 0);
                            return sent ? comm.barrier() : sent;
                          },
                          {"broadcast of f32"});
}

// The first collective after a mismatch fails too on every rank; the others' collectives before it
// returned the right numbers (the check does not disturb matching calls).
TEST_P(CollMismatch, MatchingCallsStillAgreeAroundEmptyOnes) {
  run_ranks(3, small_chunks(GetParam()), [&](Communicator& comm) {
    std::vector<float> data(5, static_cast<float>(comm.rank() + 1));
    ASSERT_TRUE(comm.allreduce(data.data(), data.data(), 0, DataType::F32, ReduceOp::Sum).has_value());
    ASSERT_TRUE(comm.allreduce(data.data(), data.data(), 5, DataType::F32, ReduceOp::Sum).has_value());
    EXPECT_EQ(data[4], 6.0f);
    ASSERT_TRUE(comm.broadcast(data.data(), data.data(), 0, DataType::F32, 2).has_value());
  });
}

TEST_P(CollMismatch, ARankThatClosesFailsThePeersCollectiveAtOnce) {
  std::latch created(3);
  run_ranks(3, small_chunks(GetParam()), [&](Communicator& comm) {
    created.arrive_and_wait();
    if (comm.rank() == 1) return;  // closes its communicator: the destructor's barrier
    std::vector<float> data(10, 1.0f);
    auto began = Clock::now();
    auto result = comm.allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum);
    ASSERT_FALSE(result.has_value());
    EXPECT_LT(Clock::now() - began, kFast);
    const std::string& e = result.error().message();
    EXPECT_TRUE(contains(e, "closing the communicator") || contains(e, "rank 1")) << e;
  });
}

TEST_P(CollMismatch, AnAbortingRankFailsEveryPeerNamingItAndWaitsForNobody) {
  for (bool peers_waiting : {true, false}) {
    std::atomic<int> entered{0};
    std::latch created(4);
    run_ranks(4, small_chunks(GetParam()), [&](Communicator& comm) {
      created.arrive_and_wait();
      std::vector<float> data(10, 1.0f);
      if (comm.rank() == 2) {
        if (peers_waiting)
          while (entered.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        auto began = Clock::now();
        comm.abort("ValueError: boom");
        auto result = comm.allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum);
        ASSERT_FALSE(result.has_value());
        EXPECT_TRUE(contains(result.error().message(), "aborted: ValueError: boom"))
            << result.error().message();
        EXPECT_LT(Clock::now() - began, kFast);
        return;  // the destructor must not wait for a barrier
      }
      ++entered;
      auto began = Clock::now();
      auto result = comm.allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum);
      if (!peers_waiting && result.has_value())  // may not have been told yet: the next one fails
        result = comm.allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum);
      ASSERT_FALSE(result.has_value());
      EXPECT_LT(Clock::now() - began, kFast);
      EXPECT_TRUE(contains(result.error().message(), "rank 2 aborted")) << result.error().message();
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CollMismatch, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdmakit::coll::testing
