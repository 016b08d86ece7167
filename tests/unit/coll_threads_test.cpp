// Every collective against a reference computed here, with threads as ranks (each with its own
// contexts), for world sizes 1 to 8, over tcp and shm, every data type and operator, counts that do not
// divide evenly, in-place and out-of-place, each allreduce algorithm, multi-chunk paths forced by
// 64-byte chunks, and several asynchronous collectives in flight.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "coll_harness.hpp"
#include "rdmakit/context.hpp"
#include "support/test_support.hpp"

namespace rdmakit::coll::testing {
namespace {

constexpr DataType kTypes[] = {DataType::F32, DataType::F64, DataType::F16, DataType::BF16,
                               DataType::I32, DataType::I64, DataType::U8};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};

class CollThreads : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    // A transport this host cannot open (a same-host one without /dev/shm, say) is skipped, whatever its
    // name.
    auto probe = Context::open(Options{.transport = transport()});
    if (!probe) GTEST_SKIP() << transport() << " transport unavailable: " << probe.error().describe();
  }
  std::string transport() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
};

TEST_P(CollThreads, AllreduceEveryTypeOperatorAndAlgorithm) {
  for (Algorithm algorithm :
       {Algorithm::Ring, Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling, Algorithm::Shared}) {
    run_ranks(n(), small_chunks(transport(), algorithm), [&](Communicator& comm) {
      std::size_t count = 37;
      int variant = 0;
      for (DataType t : kTypes)
        for (ReduceOp op : kOps) {
          auto send = fill(t, op, comm.rank(), count);
          std::vector<std::byte> recv(send.size());
          bool in_place = ++variant % 2 == 0;
          auto ok = in_place ? comm.allreduce(send.data(), send.data(), count, t, op)
                             : comm.allreduce(send.data(), recv.data(), count, t, op);
          ASSERT_TRUE(ok.has_value()) << ok.error().describe();
          check_reduced(t, op, comm.size(), in_place ? send.data() : recv.data(), count, 0,
                        std::string("allreduce/") + std::string(to_string(algorithm)));
        }
    });
  }
}

// The shared-memory allreduce (shm, one host) over messages of many rounds (512 KiB each) whose slices
// do not divide evenly, back to back and asynchronous, so that each round's buffer parity and barrier
// generation carry over from the call before. Over tcp the same calls take the staged algorithms.
TEST_P(CollThreads, SharedAllreduceOverManyRoundsBackToBack) {
  CommOptions options = small_chunks(transport());
  options.chunk_bytes = 256 << 10;  // megabyte messages in 64-byte chunks over tcp would take minutes
  run_ranks(n(), options, [&](Communicator& comm) {
    bool shared = transport() == "shm" && comm.size() > 1;
    EXPECT_EQ(comm.allreduce_algorithm(4 << 20) == "shared", shared) << comm.allreduce_algorithm(4 << 20);
    struct Case {
      DataType type;
      ReduceOp op;
      std::size_t count;
    };
    const Case cases[] = {{DataType::F32, ReduceOp::Sum, 393241},  {DataType::I64, ReduceOp::Max, 200003},
                          {DataType::U8, ReduceOp::Sum, 1},        {DataType::F64, ReduceOp::Avg, 131075},
                          {DataType::BF16, ReduceOp::Avg, 300007}, {DataType::I32, ReduceOp::Min, 7}};
    int variant = 0;
    for (const Case& c : cases) {
      auto send = fill(c.type, c.op, comm.rank(), c.count);
      std::vector<std::byte> recv(send.size());
      bool in_place = ++variant % 2 == 0;
      auto ok = in_place ? comm.allreduce(send.data(), send.data(), c.count, c.type, c.op)
                         : comm.allreduce(send.data(), recv.data(), c.count, c.type, c.op);
      ASSERT_TRUE(ok.has_value()) << ok.error().describe();
      check_reduced(c.type, c.op, comm.size(), in_place ? send.data() : recv.data(), c.count, 0,
                    "shared allreduce " + std::string(to_string(c.type)) + " x" + std::to_string(c.count));
    }
    // reduce and broadcast go through the same areas on one host: every root, out of place and in place.
    for (int root : {0, comm.size() - 1}) {
      std::size_t count = 262147 + static_cast<std::size_t>(root);  // 2-3 rounds of F32
      auto send = fill(DataType::F32, ReduceOp::Sum, comm.rank(), count);
      std::vector<std::byte> recv(send.size());
      ASSERT_TRUE(
          comm.reduce(send.data(), recv.data(), count, DataType::F32, ReduceOp::Sum, root).has_value());
      if (comm.rank() == root)
        check_reduced(DataType::F32, ReduceOp::Sum, comm.size(), recv.data(), count, 0, "shared reduce");
      ASSERT_TRUE(
          comm.reduce(send.data(), send.data(), count, DataType::F32, ReduceOp::Max, root).has_value());
      auto data = comm.rank() == root ? fill(DataType::I64, ReduceOp::Sum, root, count)
                                      : std::vector<std::byte>(count * 8, std::byte{0xee});
      ASSERT_TRUE(comm.broadcast(data.data(), data.data(), count, DataType::I64, root).has_value());
      EXPECT_EQ(data, fill(DataType::I64, ReduceOp::Sum, root, count)) << "shared broadcast from " << root;
    }
    std::vector<std::vector<std::byte>> buffers;
    std::vector<Work> works;
    for (std::size_t k = 0; k < 4; ++k)
      buffers.push_back(fill(DataType::F32, ReduceOp::Sum, comm.rank(), 150001, k));
    for (auto& b : buffers)
      works.push_back(comm.allreduce_async(b.data(), b.data(), 150001, DataType::F32, ReduceOp::Sum));
    for (std::size_t k = 0; k < works.size(); ++k) {
      ASSERT_TRUE(works[k].wait().has_value());
      check_reduced(DataType::F32, ReduceOp::Sum, comm.size(), buffers[k].data(), 150001, k, "async shared");
    }
  });
}

TEST_P(CollThreads, ReduceAndReduceScatter) {
  run_ranks(n(), small_chunks(transport()), [&](Communicator& comm) {
    int size = comm.size();
    for (DataType t : kTypes)
      for (ReduceOp op : kOps) {
        std::size_t count = 29;
        int root = (static_cast<int>(t) + static_cast<int>(op)) % size;
        auto send = fill(t, op, comm.rank(), count);
        std::vector<std::byte> recv(send.size());
        ASSERT_TRUE(comm.reduce(send.data(), recv.data(), count, t, op, root).has_value());
        if (comm.rank() == root) check_reduced(t, op, size, recv.data(), count, 0, "reduce");

        std::size_t block = 11;  // per rank; the whole input is size*block elements
        auto input = fill(t, op, comm.rank(), block * static_cast<std::size_t>(size));
        std::vector<std::byte> out(block * size_of(t));
        ASSERT_TRUE(comm.reduce_scatter(input.data(), out.data(), block, t, op).has_value());
        check_reduced(t, op, size, out.data(), block, block * static_cast<std::size_t>(comm.rank()),
                      "reduce_scatter");
        std::byte* mine = input.data() + block * size_of(t) * static_cast<std::size_t>(comm.rank());
        ASSERT_TRUE(comm.reduce_scatter(input.data(), mine, block, t, op).has_value());  // in-place
        check_reduced(t, op, size, mine, block, block * static_cast<std::size_t>(comm.rank()),
                      "reduce_scatter in-place");
      }
  });
}

// Rank r's element i for the data-movement collectives: says where it came from.
double origin(int rank, std::size_t i) { return static_cast<double>((rank * 31 + static_cast<int>(i)) % 97); }

TEST_P(CollThreads, BroadcastAllgatherAllToAll) {
  run_ranks(n(), small_chunks(transport()), [&](Communicator& comm) {
    int size = comm.size(), me = comm.rank();
    auto usize = static_cast<std::size_t>(size);
    for (DataType t : kTypes) {
      std::size_t e = size_of(t), count = 23;
      auto pattern = [&](int rank, std::size_t n, std::size_t offset) {
        std::vector<std::byte> out(n * e);
        for (std::size_t i = 0; i < n; ++i) encode(t, origin(rank, offset + i), out.data() + i * e);
        return out;
      };
      for (int root = 0; root < size; root += std::max(1, size / 2)) {
        auto data = me == root ? pattern(root, count, 0) : std::vector<std::byte>(count * e);
        ASSERT_TRUE(comm.broadcast(data.data(), data.data(), count, t, root).has_value());
        EXPECT_EQ(data, pattern(root, count, 0)) << "broadcast root " << root << " " << to_string(t);
      }
      std::vector<std::byte> gathered(count * e * usize);
      auto mine = pattern(me, count, 0);
      ASSERT_TRUE(comm.allgather(mine.data(), gathered.data(), count, t).has_value());
      for (int r = 0; r < size; ++r)
        EXPECT_TRUE(std::equal(gathered.begin() + static_cast<std::ptrdiff_t>(r * count * e),
                               gathered.begin() + static_cast<std::ptrdiff_t>((r + 1) * count * e),
                               pattern(r, count, 0).begin()))
            << "allgather block " << r;
      // all-to-all: my block j is pattern(me, count, j*count); I receive block `me` of everyone.
      auto out = pattern(me, count * usize, 0);
      std::vector<std::byte> in(out.size());
      for (bool in_place : {false, true}) {
        auto ok = in_place ? comm.all_to_all(out.data(), out.data(), count, t)
                           : comm.all_to_all(out.data(), in.data(), count, t);
        ASSERT_TRUE(ok.has_value()) << ok.error().describe();
        const auto& result = in_place ? out : in;
        for (int r = 0; r < size; ++r) {
          auto want = pattern(r, count, count * static_cast<std::size_t>(me));
          EXPECT_TRUE(std::equal(want.begin(), want.end(),
                                 result.begin() + static_cast<std::ptrdiff_t>(r * count * e)))
              << "all_to_all from " << r << (in_place ? " in-place" : "");
        }
        out = pattern(me, count * usize, 0);
      }
      ASSERT_TRUE(comm.barrier().has_value());
    }
  });
}

TEST_P(CollThreads, AsyncCollectivesCompleteInIssueOrder) {
  run_ranks(n(), small_chunks(transport()), [&](Communicator& comm) {
    constexpr int kInFlight = 6;
    std::size_t count = 45;
    std::vector<std::vector<std::byte>> buffers;
    std::vector<Work> works;
    for (int k = 0; k < kInFlight; ++k)
      buffers.push_back(fill(DataType::I32, ReduceOp::Sum, comm.rank(), count, static_cast<std::size_t>(k)));
    for (int k = 0; k < kInFlight; ++k)
      works.push_back(
          comm.allreduce_async(buffers[k].data(), buffers[k].data(), count, DataType::I32, ReduceOp::Sum));
    std::vector<std::byte> root_data(count * 4);
    if (comm.rank() == 0) root_data = fill(DataType::I32, ReduceOp::Sum, 7, count);
    Work bcast = comm.broadcast_async(root_data.data(), root_data.data(), count, DataType::I32, 0);
    // A blocking call behind queued work waits its turn.
    ASSERT_TRUE(comm.barrier().has_value());
    EXPECT_TRUE(bcast.done());
    for (int k = 0; k < kInFlight; ++k) {
      EXPECT_TRUE(works[k].done()) << "work " << k << " not done although a later collective is";
      ASSERT_TRUE(works[k].wait().has_value());
      check_reduced(DataType::I32, ReduceOp::Sum, comm.size(), buffers[k].data(), count,
                    static_cast<std::size_t>(k), "async");
    }
    ASSERT_TRUE(bcast.wait().has_value());
    EXPECT_EQ(root_data, fill(DataType::I32, ReduceOp::Sum, 7, count));
  });
}

TEST_P(CollThreads, LargeAllreduceWithDefaultChunks) {
  CommOptions options{.network_transport = "tcp", .local_transport = transport()};
  run_ranks(n(), options, [&](Communicator& comm) {
    std::size_t count = 300001;  // 1.2 MB of f32: several 128 KiB chunks per ring step at small world sizes
    auto data = fill(DataType::F32, ReduceOp::Sum, comm.rank(), count);
    ASSERT_TRUE(comm.allreduce(data.data(), data.data(), count, DataType::F32, ReduceOp::Sum).has_value());
    check_reduced(DataType::F32, ReduceOp::Sum, comm.size(), data.data(), count, 0, "large");
  });
}

// World sizes 1 to 8; the sanitizer stages (RDMAKIT_TEST_REPEAT_SCALE < 1) keep 1, 2, 3, 5 and 8: one rank,
// a power of two, uneven ones and the largest.
std::vector<int> world_sizes() {
  if (rdmakit::testing::repeat_scale() < 1) return {1, 2, 3, 5, 8};
  return {1, 2, 3, 4, 5, 6, 7, 8};
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollThreads,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::ValuesIn(world_sizes())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

TEST(CollSetup, ARankThatNeverShowsUpFailsTheOthersWithItsNumber) {
  auto store = bootstrap::make_memory_store();
  CommOptions options = small_chunks("tcp");
  options.bootstrap_timeout = std::chrono::milliseconds(300);
  auto comm = Communicator::create(store, 0, 3, options);  // ranks 1 and 2 never come
  ASSERT_FALSE(comm.has_value());
  EXPECT_EQ(comm.error().code(), Errc::Timeout);
  EXPECT_NE(comm.error().message().find("rank 1 of 3 did not show up"), std::string::npos)
      << comm.error().message();
}

TEST(CollSetup, ABadEnvironmentValueIsAnErrorNamingTheVariable) {
  for (const char* bad : {"-1", "5ms", ""}) {
    ::setenv("RDMAKIT_COLL_SPIN_US", bad, 1);
    auto comm =
        Communicator::create(bootstrap::make_memory_store(), 0, 1, CommOptions{.network_transport = "tcp"});
    ::unsetenv("RDMAKIT_COLL_SPIN_US");
    ASSERT_FALSE(comm.has_value()) << "RDMAKIT_COLL_SPIN_US='" << bad << "' was accepted";
    EXPECT_EQ(comm.error().code(), Errc::InvalidArgument);
    EXPECT_NE(comm.error().message().find("RDMAKIT_COLL_SPIN_US"), std::string::npos)
        << comm.error().message();
  }
}

TEST(CollSetup, BadArgumentsAreErrorsNotCrashes) {
  run_ranks(1, small_chunks("tcp"), [](Communicator& comm) {
    int x = 0;
    EXPECT_EQ(comm.allreduce(nullptr, &x, 4, DataType::I32, ReduceOp::Sum).error().code(),
              Errc::InvalidArgument);
    EXPECT_EQ(comm.broadcast(&x, &x, 1, DataType::I32, 3).error().code(), Errc::InvalidArgument);
    EXPECT_EQ(comm.allreduce(&x, &x, 1, DataType::I32, static_cast<ReduceOp>(99)).error().code(),
              Errc::InvalidArgument);
    EXPECT_FALSE(
        comm.allreduce_async(&x, &x, 1, static_cast<DataType>(42), ReduceOp::Sum).wait().has_value());
    EXPECT_TRUE(
        comm.allreduce(&x, &x, 0, DataType::I32, ReduceOp::Sum).has_value());  // zero elements is fine
  });
}

}  // namespace
}  // namespace rdmakit::coll::testing
