// Hierarchical allreduce with simulated hosts: threads as ranks, each told its host (coll_host_id), so
// same-host pairs use the local transport and the others tcp, as across machines. Every data type and
// operator, in-place and out-of-place, each algorithm among the leaders, multi-chunk paths forced by
// 64-byte chunks; host layouts contiguous, interleaved and uneven. Also the pure logic: which ranks form
// a host and who leads it, and the Exchange's renumbering for a subgroup.
#include <gtest/gtest.h>

#include <optional>

#include "coll/cost_model.hpp"
#include "coll/exchange.hpp"
#include "coll/hierarchy.hpp"
#include "coll_harness.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::testing {
namespace {

using detail::HostGroups;

constexpr DataType kTypes[] = {DataType::F32, DataType::F64, DataType::F16, DataType::BF16,
                               DataType::I32, DataType::I64, DataType::U8};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};

TEST(CollHierarchy, HostsAreNumberedInOrderOfFirstAppearance) {
  std::vector<std::string> hosts{"b", "a", "b", "c", "a"};
  EXPECT_EQ(detail::number_hosts(hosts), (std::vector<int>{0, 1, 0, 2, 1}));
}

TEST(CollHierarchy, GroupsAndLeadersForContiguousInterleavedAndUnevenHosts) {
  std::vector<int> contiguous{0, 0, 1, 1};
  HostGroups g = detail::host_groups(contiguous, 3);
  EXPECT_EQ(g.local, (std::vector<int>{2, 3}));
  EXPECT_EQ(g.leaders, (std::vector<int>{0, 2}));
  EXPECT_EQ(g.largest_host, 2);
  EXPECT_TRUE(detail::hierarchy_applies(g));

  std::vector<int> interleaved{0, 1, 0, 2, 2, 2};
  g = detail::host_groups(interleaved, 2);
  EXPECT_EQ(g.local, (std::vector<int>{0, 2}));
  EXPECT_EQ(g.leaders, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(g.largest_host, 3);
  g = detail::host_groups(interleaved, 1);
  EXPECT_EQ(g.local, (std::vector<int>{1}));  // alone on its host: its own leader

  std::vector<int> one_host{0, 0, 0};
  EXPECT_FALSE(detail::hierarchy_applies(detail::host_groups(one_host, 1)));  // nothing to save
  std::vector<int> one_per_host{0, 1, 2};
  EXPECT_FALSE(detail::hierarchy_applies(detail::host_groups(one_per_host, 1)));
}

TEST(CollHierarchy, SubgroupRenumbersAndNests) {
  detail::Exchange ex(5, 8, 64, 2, std::chrono::milliseconds(1000), std::chrono::microseconds(0));
  {
    detail::Exchange::Subgroup host(ex, {4, 5, 7});
    EXPECT_EQ(ex.rank(), 1);
    EXPECT_EQ(ex.size(), 3);
    EXPECT_EQ(ex.world_rank(2), 7);
    {
      detail::Exchange::Subgroup leaders(ex, {1, 5});
      EXPECT_EQ(ex.rank(), 1);
      EXPECT_EQ(ex.size(), 2);
      EXPECT_EQ(ex.world_rank(0), 1);
    }
    EXPECT_EQ(ex.size(), 3);
    EXPECT_EQ(ex.world_rank(0), 4);
  }
  EXPECT_EQ(ex.rank(), 5);
  EXPECT_EQ(ex.size(), 8);
  EXPECT_EQ(ex.world_rank(3), 3);
}

// The link cost `transport` declares (Capabilities), as the communicator asks it; nullopt when it does not
// open here.
std::optional<detail::LinkCost> declared_cost(const std::string& transport) {
  auto context = Context::open(Options{.transport = transport});
  if (!context) return std::nullopt;
  return detail::link_cost((*context)->capabilities());
}

TEST(CollCostModel, EveryTransportDeclaresALinkCostAndUndeclaredGetsTcps) {
  auto tcp = declared_cost("tcp");
  ASSERT_TRUE(tcp.has_value());
  EXPECT_DOUBLE_EQ(tcp->alpha_us, 26);
  EXPECT_DOUBLE_EQ(tcp->beta_us, 1.0 / 620);
  detail::LinkCost undeclared = detail::link_cost(Capabilities{});
  EXPECT_DOUBLE_EQ(undeclared.alpha_us, tcp->alpha_us);
  EXPECT_DOUBLE_EQ(undeclared.beta_us, tcp->beta_us);
  EXPECT_DOUBLE_EQ(undeclared.gamma_us, tcp->gamma_us);
  auto shm = declared_cost("shm");
  if (!shm) GTEST_SKIP() << "shm transport unavailable";
  EXPECT_DOUBLE_EQ(shm->alpha_us, 3.2);
  EXPECT_DOUBLE_EQ(shm->beta_us, 1.0 / 2290);
}

TEST(CollCostModel, ChoosesByLatencyForSmallAndBandwidthForLargeMessages) {
  auto shm = declared_cost("shm"), tcp = declared_cost("tcp");
  if (!shm || !tcp) GTEST_SKIP() << "shm or tcp transport unavailable";
  detail::Topology one_host{.ranks = 8, .local = *shm, .network = *tcp};
  auto small = detail::choose_allreduce(one_host, 1024, Algorithm::Auto, Hierarchy::Auto);
  EXPECT_EQ(small.algorithm, Algorithm::RecursiveDoubling);  // log2(8) steps beat 14
  EXPECT_FALSE(small.hierarchical);                          // one host: nothing to save
  auto large = detail::choose_allreduce(one_host, 64 << 20, Algorithm::Auto, Hierarchy::Auto);
  EXPECT_NE(large.algorithm, Algorithm::RecursiveDoubling);  // rd moves the whole message log2(8) times
  EXPECT_GT(large.predicted_us, small.predicted_us);
  EXPECT_EQ(detail::ring_cost(one_host.local, 1, 1 << 20), 0);
  // The ring's bandwidth term approaches 2 bytes moved per byte of message; rd's grows with log2(n).
  EXPECT_LT(detail::ring_cost(one_host.local, 64, 1 << 30),
            detail::doubling_cost(one_host.local, 64, 1 << 30));
}

TEST(CollCostModel, HierarchyPaysAcrossHostsAndOptionsForceThePlan) {
  auto shm = declared_cost("shm"), tcp = declared_cost("tcp");
  if (!shm || !tcp) GTEST_SKIP() << "shm or tcp transport unavailable";
  detail::Topology cluster{.ranks = 1024, .hosts = 128, .per_host = 8, .local = *shm, .network = *tcp};
  // Latency: 2 * 1023 ring steps, or doubling steps that all share a host's link, against two local
  // trees and the steps among 128 leaders.
  for (double bytes : {4096.0, double(1 << 20)})
    EXPECT_TRUE(detail::choose_allreduce(cluster, bytes, Algorithm::Auto, Hierarchy::Auto).hierarchical)
        << bytes;
  // Bandwidth: a ring over consecutive hosts crosses each host's link once, as the leaders' ring does,
  // without the local stages on top.
  auto huge = detail::choose_allreduce(cluster, double(1 << 30), Algorithm::Auto, Hierarchy::Auto);
  EXPECT_FALSE(huge.hierarchical);
  EXPECT_EQ(huge.algorithm, Algorithm::Ring);
  auto off = detail::choose_allreduce(cluster, 1 << 20, Algorithm::Auto, Hierarchy::Off);
  EXPECT_FALSE(off.hierarchical);
  auto forced = detail::choose_allreduce(cluster, 4096, Algorithm::Ring, Hierarchy::Off);
  EXPECT_EQ(forced.algorithm, Algorithm::Ring);
  EXPECT_FALSE(forced.hierarchical);
  detail::Topology single = cluster;
  single.hosts = 1, single.per_host = 1024;
  EXPECT_TRUE(detail::choose_allreduce(single, 4096, Algorithm::HalvingDoubling, Hierarchy::On).hierarchical);
  EXPECT_EQ(detail::choose_allreduce(single, 4096, Algorithm::HalvingDoubling, Hierarchy::On).algorithm,
            Algorithm::HalvingDoubling);
}

struct Layout {
  const char* name;
  std::vector<int> host_of;
};

class CollHierarchyThreads : public ::testing::TestWithParam<std::tuple<std::string, Layout>> {
 protected:
  void SetUp() override {
    if (auto probe = Context::open(Options{.transport = local()}); !probe)
      GTEST_SKIP() << local() << " transport unavailable: " << probe.error().describe();
  }
  std::string local() const { return std::get<0>(GetParam()); }
  const std::vector<int>& hosts() const { return std::get<1>(GetParam()).host_of; }
  int n() const { return static_cast<int>(hosts().size()); }
  // Rank r's options: its simulated host, and the given algorithm and hierarchy.
  std::function<CommOptions(int)> options(Algorithm algorithm, Hierarchy hierarchy) const {
    return [=, this](int rank) {
      CommOptions o = small_chunks(local(), algorithm);
      o.hierarchical = hierarchy;
      o.host_id = "host" + std::to_string(hosts()[static_cast<std::size_t>(rank)]);
      return o;
    };
  }
};

TEST_P(CollHierarchyThreads, EveryTypeOperatorAndLeaderAlgorithmIsExact) {
  for (Algorithm algorithm : {Algorithm::Ring, Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling}) {
    run_ranks(n(), options(algorithm, Hierarchy::On), [&](Communicator& comm) {
      EXPECT_EQ(comm.allreduce_algorithm(1 << 20), "hier:" + std::string(to_string(algorithm)));
      std::size_t count = 37;  // several 64-byte chunks, and blocks that do not divide evenly
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
                        "hier allreduce/" + std::string(to_string(algorithm)));
        }
    });
  }
}

TEST_P(CollHierarchyThreads, AutoFollowsTheCostModelAndOffDisablesTheHierarchy) {
  std::vector<int> host_of = hosts();
  HostGroups groups = detail::host_groups(host_of, 0);
  detail::Topology topology{.ranks = n(),
                            .hosts = static_cast<int>(groups.leaders.size()),
                            .per_host = groups.largest_host,
                            .local = *declared_cost(local()),
                            .network = *declared_cost("tcp")};
  auto model = detail::choose_allreduce(topology, 4096, Algorithm::Auto, Hierarchy::Auto);
  // The layout CI runs across namespaces: two hosts of two ranks, whose local link is cheaper per message
  // than the network (shm and tcp), go hierarchical.
  if (topology.local.alpha_us < topology.network.alpha_us &&
      std::get<1>(GetParam()).name == std::string("two_hosts_of_two")) {
    EXPECT_TRUE(model.hierarchical);
  }
  for (Hierarchy h : {Hierarchy::Auto, Hierarchy::Off}) {
    run_ranks(n(), options(Algorithm::Auto, h), [&](Communicator& comm) {
      std::string plan = comm.allreduce_algorithm(4096);
      EXPECT_EQ(plan.starts_with("hier:"), h == Hierarchy::Auto && model.hierarchical) << plan;
      // One host over shm: the shared-memory allreduce, which the cost model does not weigh (it wins at
      // every size there).
      bool shared = topology.hosts == 1 && local() == std::string("shm");
      EXPECT_TRUE(plan.ends_with(shared ? "shared" : to_string(model.algorithm)) || h == Hierarchy::Off)
          << plan;
      EXPECT_EQ(comm.local_size(),
                std::count(host_of.begin(), host_of.end(), host_of[static_cast<std::size_t>(comm.rank())]));
      // Other collectives and async allreduce share the connections with the hierarchical stages.
      std::size_t count = 45;
      std::vector<std::vector<std::byte>> buffers;
      std::vector<Work> works;
      for (int k = 0; k < 3; ++k)
        buffers.push_back(
            fill(DataType::I32, ReduceOp::Sum, comm.rank(), count, static_cast<std::size_t>(k)));
      for (auto& b : buffers)
        works.push_back(comm.allreduce_async(b.data(), b.data(), count, DataType::I32, ReduceOp::Sum));
      ASSERT_TRUE(comm.barrier().has_value());
      for (int k = 0; k < 3; ++k) {
        ASSERT_TRUE(works[static_cast<std::size_t>(k)].wait().has_value());
        check_reduced(DataType::I32, ReduceOp::Sum, comm.size(), buffers[static_cast<std::size_t>(k)].data(),
                      count, static_cast<std::size_t>(k), "async");
      }
      auto data = fill(DataType::F32, ReduceOp::Sum, comm.rank(), count);
      ASSERT_TRUE(
          comm.broadcast(data.data(), data.data(), count, DataType::F32, comm.size() - 1).has_value());
      EXPECT_EQ(data, fill(DataType::F32, ReduceOp::Sum, comm.size() - 1, count));
    });
  }
}

// Default chunks (none configured): 512 KiB slots between ranks of a simulated host over shm, 128 KiB
// over tcp between hosts, so a flat ring step whose neighbours sit on different fabrics sends and
// receives in chunks of different sizes, and the trees use the smaller one. Messages of several chunks of
// both sizes; the staged algorithms run in place (Exchange::InPlace).
TEST_P(CollHierarchyThreads, DefaultChunksDifferBetweenFabricsAndStayExact) {
  auto defaults = [this](Algorithm algorithm) {
    return [=, this](int rank) {
      CommOptions o = options(algorithm, Hierarchy::Off)(rank);
      o.chunk_bytes.reset();
      return o;
    };
  };
  for (Algorithm algorithm : {Algorithm::Ring, Algorithm::HalvingDoubling}) {
    run_ranks(n(), defaults(algorithm), [&](Communicator& comm) {
      std::size_t count = std::size_t{600} << 10;  // 2.4 MB of f32: blocks of 400-1200 KB at 2-6 ranks
      auto data = fill(DataType::F32, ReduceOp::Sum, comm.rank(), count);
      ASSERT_TRUE(comm.allreduce(data.data(), data.data(), count, DataType::F32, ReduceOp::Sum).has_value());
      check_reduced(DataType::F32, ReduceOp::Sum, comm.size(), data.data(), count, 0, "default chunks");
      auto root = fill(DataType::I32, ReduceOp::Sum, comm.size() - 1, count);
      auto got = comm.rank() == comm.size() - 1 ? root : std::vector<std::byte>(root.size());
      ASSERT_TRUE(comm.broadcast(got.data(), got.data(), count, DataType::I32, comm.size() - 1).has_value());
      EXPECT_EQ(got, root);
      auto mine = fill(DataType::I32, ReduceOp::Sum, comm.rank(), count / 4);
      std::vector<std::byte> all(mine.size() * static_cast<std::size_t>(comm.size()));
      ASSERT_TRUE(comm.allgather(mine.data(), all.data(), count / 4, DataType::I32).has_value());
      for (int r = 0; r < comm.size(); ++r)
        EXPECT_TRUE(std::equal(mine.size() * static_cast<std::size_t>(r) + all.begin(),
                               mine.size() * static_cast<std::size_t>(r + 1) + all.begin(),
                               fill(DataType::I32, ReduceOp::Sum, r, count / 4).begin()))
            << "allgather block " << r;
    });
  }
}

const Layout kLayouts[] = {
    {"two_hosts_of_two", {0, 0, 1, 1}},
    {"interleaved_uneven", {0, 1, 0, 2, 2, 2}},  // 3 leaders: the doubling algorithms fold
    {"one_host", {0, 0, 0}},                     // forced on: a reduce and a broadcast, no leaders' stage
    {"four_hosts_of_two", {0, 1, 2, 3, 0, 1, 2, 3}},
};

INSTANTIATE_TEST_SUITE_P(Layouts, CollHierarchyThreads,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::ValuesIn(kLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace rdmakit::coll::testing
