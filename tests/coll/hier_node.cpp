// One rank of tests/coll/hier_netns.sh: four ranks in two network namespaces ("hosts" of two ranks, joined
// by a veth pair), launched torchrun-style. Checks that the communicator sees two hosts of two ranks,
// chooses the hierarchical allreduce by itself, and that the hierarchical allreduce with each algorithm
// among the leaders (and the flat ring for comparison) is exact for every data type and operator, with
// multi-chunk messages, and for a 4 MiB message with the default chunks.
#include <gtest/gtest.h>

#include <cstdlib>

#include "../unit/coll_harness.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::testing {
namespace {

constexpr DataType kTypes[] = {DataType::F32, DataType::F64, DataType::F16, DataType::BF16,
                               DataType::I32, DataType::I64, DataType::U8};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};

std::shared_ptr<bootstrap::Store> join(bootstrap::LaunchInfo& launch) {
  auto info = bootstrap::detect_launch();
  if (!info) return nullptr;
  launch = *info;
  auto store = bootstrap::open_store(launch, std::chrono::milliseconds(30000));
  return store ? *store : nullptr;
}

void every_type_and_operator(Communicator& comm, const std::string& what) {
  std::size_t count = 301;  // 2.4 KB of f64 through 256-byte chunks
  int variant = 0;
  for (DataType t : kTypes)
    for (ReduceOp op : kOps) {
      auto send = fill(t, op, comm.rank(), count);
      std::vector<std::byte> recv(send.size());
      bool in_place = ++variant % 2 == 0;
      auto ok = in_place ? comm.allreduce(send.data(), send.data(), count, t, op)
                         : comm.allreduce(send.data(), recv.data(), count, t, op);
      ASSERT_TRUE(ok.has_value()) << what << ": " << ok.error().describe();
      check_reduced(t, op, comm.size(), in_place ? send.data() : recv.data(), count, 0, what);
    }
}

TEST(CollHierNetns, TwoHostsOfTwoRanksAllreduceExactly) {
  if (!std::getenv("RANK")) GTEST_SKIP() << "one rank of tests/coll/hier_netns.sh, which launches it";
  bootstrap::LaunchInfo launch;
  auto store = join(launch);
  ASSERT_TRUE(store) << "rank could not reach the store";
  bool shm = Context::open(Options{.transport = "shm"}).has_value();
  struct Case {
    const char* prefix;
    Algorithm algorithm;
    Hierarchy hierarchy;
    const char* expected;
  };
  const Case cases[] = {{"auto/", Algorithm::Auto, Hierarchy::Auto, "hier:"},
                        {"ring/", Algorithm::Ring, Hierarchy::Auto, "hier:ring"},
                        {"rd/", Algorithm::RecursiveDoubling, Hierarchy::Auto, "hier:rd"},
                        {"hd/", Algorithm::HalvingDoubling, Hierarchy::On, "hier:hd"},
                        {"flat/", Algorithm::Ring, Hierarchy::Off, "ring"}};
  for (const Case& c : cases) {
    CommOptions options{.network_transport = "tcp",
                        .timeout = std::chrono::milliseconds(60000),
                        .bootstrap_timeout = std::chrono::milliseconds(30000),
                        .chunk_bytes = 256,
                        .slots = 2,
                        .algorithm = c.algorithm,
                        .hierarchical = c.hierarchy,
                        .key_prefix = c.prefix};
    auto comm = Communicator::create(store, launch.rank, launch.world_size, options);
    ASSERT_TRUE(comm.has_value()) << comm.error().describe();
    ASSERT_EQ((*comm)->size(), 4);
    EXPECT_EQ((*comm)->local_size(), 2) << "the namespaces should make two hosts of two ranks";
    if (shm) {
      EXPECT_EQ((*comm)->transports(), "shm+tcp");
    }
    // Without shm the hosts' ranks talk tcp too, and the model may rightly keep small messages flat.
    if (shm || c.hierarchy != Hierarchy::Auto) {
      EXPECT_TRUE((*comm)->allreduce_algorithm(4096).starts_with(c.expected))
          << (*comm)->allreduce_algorithm(4096);
    }
    every_type_and_operator(**comm, std::string(c.prefix) + (*comm)->allreduce_algorithm(2408));
  }
  // Default chunks: several 512 KiB chunks per stage.
  auto comm = Communicator::create(store, launch.rank, launch.world_size,
                                   CommOptions{.network_transport = "tcp", .key_prefix = "large/"});
  ASSERT_TRUE(comm.has_value()) << comm.error().describe();
  std::size_t count = (4 << 20) / 4 + 3;
  auto data = fill(DataType::F32, ReduceOp::Sum, launch.rank, count);
  ASSERT_TRUE((*comm)->allreduce(data.data(), data.data(), count, DataType::F32, ReduceOp::Sum).has_value());
  check_reduced(DataType::F32, ReduceOp::Sum, 4, data.data(), count, 0, "4 MiB");
}

}  // namespace
}  // namespace rdmakit::coll::testing
