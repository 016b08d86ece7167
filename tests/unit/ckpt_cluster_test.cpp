// Checkpoints at cluster scale, in one process: threads as ranks, two ranks per "node", each node with its
// own directory (node-local NVMe, no shared file system) and its own replica server (`rdmakit-ckpt serve`)
// holding the replicas of the other node's ranks. A node is lost by deleting its directory and stopping
// its server; the restarted job restores the newest step from the survivors' disks and the replicas,
// every byte checked, and says where each shard came from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "ckpt/persist.hpp"
#include "ckpt_support.hpp"
#include "rdmakit/ckpt/serve.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::PatternState;
using testing::run_ranks;
using testing::TempDir;

constexpr int kRanks = 4;
constexpr int kRanksPerNode = 2;
constexpr int kNodes = kRanks / kRanksPerNode;

std::uint64_t seed(std::uint64_t step, int rank) { return step * 10 + static_cast<std::uint64_t>(rank); }
int node_of(int rank) { return rank / kRanksPerNode; }

struct Cluster {
  TempDir root;
  std::vector<std::unique_ptr<ReplicaServer>> servers{kNodes};

  std::string directory(int node) const { return root.path() + "/node" + std::to_string(node); }
  void start_server(int node) {
    auto server = ReplicaServer::create(ServeOptions{.transport = "tcp", .budget_bytes = 64 << 20});
    ASSERT_TRUE(server) << server.error().describe();
    servers[node] = std::move(*server);
  }
  // A rank's replica lives on the next node (a ring over nodes, never its own).
  EngineOptions options(coll::Communicator& comm, bool replicas) const {
    auto options = testing::test_options(directory(node_of(comm.rank())));
    options.communicator = &comm;
    if (replicas) options.replica = servers[(node_of(comm.rank()) + 1) % kNodes]->address();
    return options;
  }
  void lose_node(int node) {
    servers[node].reset();
    fs::remove_all(directory(node));
  }
};

void commit_steps(Cluster& cluster, bool replicas, std::uint64_t first, std::uint64_t last) {
  run_ranks(kRanks, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(cluster.options(comm, replicas), state.buffers());
    ASSERT_TRUE(engine) << engine.error().describe();
    for (auto step = first; step <= last; ++step) {
      state.fill(seed(step, comm.rank()));
      ASSERT_TRUE((*engine)->snapshot(step));
      auto report = (*engine)->wait_persisted();
      ASSERT_TRUE(report) << "rank " << comm.rank() << ": " << report.error().describe();
      EXPECT_EQ(report->replicated, replicas);
    }
  });
}

// Restores with every rank and checks each one's bytes; returns each rank's source.
std::vector<std::string> restore_all(Cluster& cluster, bool replicas, std::uint64_t expected_step) {
  std::vector<std::string> sources(kRanks);
  std::mutex mutex;
  run_ranks(kRanks, [&](coll::Communicator& comm) {
    PatternState state;
    state.fill(999);
    auto engine = Engine::create(cluster.options(comm, replicas), state.buffers());
    ASSERT_TRUE(engine) << engine.error().describe();
    auto step = (*engine)->restore_latest();
    ASSERT_TRUE(step) << "rank " << comm.rank() << ": " << step.error().describe();
    EXPECT_EQ(*step, expected_step);
    EXPECT_TRUE(state.matches(seed(expected_step, comm.rank()))) << "rank " << comm.rank();
    std::lock_guard lock(mutex);
    sources[comm.rank()] = (*engine)->restored_from();
  });
  return sources;
}

TEST(CkptCluster, NodeLocalDirectoriesEachHoldTheirNodesShardsAndTheCommitRecord) {
  Cluster cluster;
  commit_steps(cluster, false, 1, 3);
  for (int node = 0; node < kNodes; ++node) {
    auto list = list_checkpoints(cluster.directory(node));
    ASSERT_TRUE(list);
    ASSERT_EQ(list->size(), 2u);  // keep = 2, applied in every directory
    EXPECT_EQ(list->front().step, 3u);
    EXPECT_EQ(list->front().manifest.world_size, static_cast<std::uint32_t>(kRanks));
    for (int rank = 0; rank < kRanks; ++rank)
      EXPECT_EQ(fs::exists(list->front().path + "/" + detail::data_file_name(rank)), node_of(rank) == node)
          << "node " << node << " rank " << rank;
  }
  auto sources = restore_all(cluster, false, 3);
  for (int rank = 0; rank < kRanks; ++rank)
    EXPECT_EQ(sources[rank], cluster.directory(node_of(rank)) + "/" + detail::checkpoint_name(3));
}

// `rdmakit-ckpt verify` in one node's directory: that node's shards are read and checked, the other
// node's are named, not reported missing; a shard lost from beside its shard manifest is still an error.
TEST(CkptCluster, ANodesCopyVerifiesItsOwnShardsAndNamesTheOthers) {
  Cluster cluster;
  commit_steps(cluster, false, 1, 1);
  std::string node1 = cluster.directory(1) + "/" + detail::checkpoint_name(1);
  auto found = verify_node_checkpoint(node1);
  ASSERT_TRUE(found) << found.error().describe();
  EXPECT_EQ(found->verified, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(found->elsewhere, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_FALSE(verify_checkpoint(node1));  // the whole checkpoint is not in one directory

  // A flipped byte in this node's shard is found and named.
  {
    std::fstream data(node1 + "/" + detail::data_file_name(3),
                      std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(data);
    data.seekg(100);
    char byte = 0;
    ASSERT_TRUE(data.get(byte));
    data.seekp(100);
    data.put(static_cast<char>(byte ^ 1));
  }
  auto flipped = verify_node_checkpoint(node1);
  ASSERT_FALSE(flipped);
  EXPECT_NE(flipped.error().message().find("checksum mismatch in " + detail::data_file_name(3)),
            std::string::npos)
      << flipped.error().message();

  // A data file gone from beside its shard manifest is missing, not another node's.
  std::string node0 = cluster.directory(0) + "/" + detail::checkpoint_name(1);
  fs::remove(node0 + "/" + detail::data_file_name(1));
  auto missing = verify_node_checkpoint(node0);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find(detail::data_file_name(1)), std::string::npos)
      << missing.error().message();
}

TEST(CkptCluster, ANodeLostWithItsDiskIsRestoredFromTheSurvivorsDisksAndReplicas) {
  Cluster cluster;
  for (int node = 0; node < kNodes; ++node) cluster.start_server(node);
  commit_steps(cluster, true, 1, 3);
  cluster.lose_node(1);     // its ranks, its disk and the replicas it held for node 0
  cluster.start_server(1);  // the replacement node: empty disk, empty server
  auto sources = restore_all(cluster, true, 3);
  for (int rank = 0; rank < kRanks; ++rank)
    if (node_of(rank) == 1)
      EXPECT_EQ(sources[rank], "replica at " + cluster.servers[0]->address()) << "rank " << rank;
    else
      EXPECT_EQ(sources[rank], cluster.directory(0) + "/" + detail::checkpoint_name(3)) << "rank " << rank;
}

TEST(CkptCluster, LosingMoreThanTheReplicasCoverNamesTheMissingShards) {
  Cluster cluster;
  for (int node = 0; node < kNodes; ++node) cluster.start_server(node);
  commit_steps(cluster, true, 1, 2);
  cluster.lose_node(1);
  cluster.servers[0].reset();  // node 0's server (node 1's replicas) is lost too
  for (int node = 0; node < kNodes; ++node) cluster.start_server(node);
  run_ranks(kRanks, [&](coll::Communicator& comm) {
    PatternState state;
    state.fill(999);
    auto engine = Engine::create(cluster.options(comm, true), state.buffers());
    ASSERT_TRUE(engine) << engine.error().describe();
    auto step = (*engine)->restore_latest();
    ASSERT_FALSE(step);
    EXPECT_EQ(step.error().code(), Errc::NotFound) << step.error().describe();
    EXPECT_NE(step.error().message().find("rank(s) 2, 3 hold no shard"), std::string::npos)
        << step.error().message();
    EXPECT_TRUE(state.matches(999));  // untouched: a fresh start is safe
  });
}

// A crash between two directories' renames: node 0 committed step 3, node 1 did not. Every rank restores
// step 2, which both directories still hold (old checkpoints go only once every directory committed).
TEST(CkptCluster, AStepCommittedInOneDirectoryOnlyGivesWayToTheNewestComplete) {
  ::rdmakit::testing::expect_warning("trying step 2");
  Cluster cluster;
  commit_steps(cluster, false, 1, 3);
  fs::remove_all(cluster.directory(1) + "/" + detail::checkpoint_name(3));
  restore_all(cluster, false, 2);
}

// Replicas of step 4 were pushed but step 4 was never committed (every directory lost it), and node 1 is
// gone: its ranks take step 3 from the replica before the newest, which their server still holds.
TEST(CkptCluster, AReplicaPushedButNeverCommittedGivesWayToTheOneBefore) {
  ::rdmakit::testing::expect_warning("trying step 3");
  Cluster cluster;
  for (int node = 0; node < kNodes; ++node) cluster.start_server(node);
  commit_steps(cluster, true, 3, 4);
  fs::remove_all(cluster.directory(0) + "/" + detail::checkpoint_name(4));
  cluster.lose_node(1);
  cluster.start_server(1);
  auto sources = restore_all(cluster, true, 3);
  EXPECT_EQ(sources[2], "replica at " + cluster.servers[0]->address());
  EXPECT_EQ(sources[0], cluster.directory(0) + "/" + detail::checkpoint_name(3));
}

// Every rank gives the same list of one server per node; the engine places each rank's replica on the next
// node's server (a ring over the hosts the communicator sees), never its own.
TEST(CkptCluster, AListOfServersPlacesEachRanksReplicaOnTheNextNode) {
  Cluster cluster;
  for (int node = 0; node < kNodes; ++node) cluster.start_server(node);
  std::string list = cluster.servers[0]->address() + "," + cluster.servers[1]->address();
  run_ranks(
      kRanks,
      [&](coll::Communicator& comm) {
        EXPECT_EQ(comm.host_count(), kNodes);
        EXPECT_EQ(comm.host_rank(), node_of(comm.rank()));
        PatternState state;
        auto options = cluster.options(comm, false);
        options.replica = list;
        auto engine = Engine::create(options, state.buffers());
        ASSERT_TRUE(engine) << engine.error().describe();
        state.fill(seed(5, comm.rank()));
        ASSERT_TRUE((*engine)->snapshot(5));
        auto report = (*engine)->wait_persisted();
        ASSERT_TRUE(report) << report.error().describe();
        EXPECT_TRUE(report->replicated);
      },
      kRanksPerNode);
  for (int rank = 0; rank < kRanks; ++rank) {
    int holder = (node_of(rank) + 1) % kNodes;
    EXPECT_EQ(cluster.servers[holder]->newest(rank).value_or(ReplicaInfo{}).step, 5u) << "rank " << rank;
    EXPECT_FALSE(cluster.servers[node_of(rank)]->newest(rank)) << "rank " << rank << " on its own node";
  }
}

// A list that does not fit the job is refused at create, on every rank alike, naming what is wrong.
TEST(CkptCluster, AListOfServersThatDoesNotFitTheJobIsRefused) {
  Cluster cluster;
  auto refused = [&](const std::string& list, int ranks_per_host, const std::string& why) {
    run_ranks(
        kRanks,
        [&](coll::Communicator& comm) {
          PatternState state;
          auto options = cluster.options(comm, false);
          options.replica = list;
          auto engine = Engine::create(options, state.buffers());
          ASSERT_FALSE(engine) << list;
          EXPECT_EQ(engine.error().code(), Errc::InvalidArgument);
          EXPECT_NE(engine.error().message().find(why), std::string::npos) << engine.error().message();
        },
        ranks_per_host);
  };
  refused("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", kRanksPerNode, "3 servers for 2 hosts");
  refused("127.0.0.1:1,127.0.0.1:2", 0, "every rank runs on one host");
  refused("127.0.0.1:1,", kRanksPerNode, "empty entry");
  PatternState state;
  auto alone = testing::test_options(cluster.directory(0));
  alone.replica = "127.0.0.1:1,127.0.0.1:2";
  auto engine = Engine::create(alone, state.buffers());
  ASSERT_FALSE(engine);
  EXPECT_NE(engine.error().message().find("needs a communicator"), std::string::npos)
      << engine.error().message();
}

}  // namespace
}  // namespace rdmakit::ckpt
