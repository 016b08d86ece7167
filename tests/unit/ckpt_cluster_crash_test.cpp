// A node lost at random moments: a writer process runs a job of 4 ranks (threads, each with its own
// communicator and engine) as 2 "nodes" of 2 ranks, each node with its own directory (node-local disk) and
// each rank's replica on the other node's `rdmakit-ckpt serve` (ReplicaServers in this process, so they
// outlive the writer). The writer is killed with SIGKILL at numbered points of the commit on node 1's
// leader (between the two directories' commit records) and at random moments while it persists and pushes
// replicas; then one node is lost: its directory is deleted and its server (the replicas it held for the
// other node) is replaced by an empty one. The restarted job must restore, on every rank, the same step,
// bit-exactly, never older than the last step the writer saw committed, the lost node's shards from the
// replicas.
//
// The writer is this program re-executed with CKPT_CLUSTER_WRITER set (read before main: gtest never starts).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <atomic>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "ckpt/persist.hpp"
#include "ckpt_support.hpp"
#include "rdmakit/ckpt/serve.hpp"
#include "support/test_support.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::PatternState;
using testing::run_ranks;

constexpr int kRanks = 4;
constexpr int kNodes = 2;
int node_of(int rank) { return rank / (kRanks / kNodes); }
std::uint64_t seed(std::uint64_t step, int rank) { return step * 10 + static_cast<std::uint64_t>(rank); }

// What every rank of one job needs: the nodes' directories and servers' addresses.
struct Layout {
  std::array<std::string, kNodes> directories;
  std::array<std::string, kNodes> servers;

  EngineOptions options(coll::Communicator& comm, int crash_point) const {
    int node = node_of(comm.rank());
    auto options = testing::test_options(directories[node]);
    options.communicator = &comm;
    options.replica = servers[(node + 1) % kNodes];  // a ring over nodes, never the rank's own
    options.crash_point = crash_point;
    return options;
  }
};

// One rank of the writer: resume, then commit one step after another; rank 0 logs each committed step.
bool write_steps(coll::Communicator& comm, const Layout& layout, int crash_point, int steps,
                 const std::string& log) {
  PatternState state;
  auto engine = Engine::create(layout.options(comm, crash_point), state.buffers());
  if (!engine) return false;
  auto start = (*engine)->restore_latest();
  if (!start && start.error().code() != Errc::NotFound) return false;
  std::uint64_t step = start ? *start + 1 : 1;
  for (int i = 0; i < steps; ++i, ++step) {
    state.fill(seed(step, comm.rank()));
    if (!(*engine)->snapshot(step) || !(*engine)->wait_persisted()) return false;
    if (comm.rank() == 0) std::ofstream(log, std::ios::app) << step << "\n";
  }
  return true;
}

int run_writer(const Layout& layout, int crash_rank, int crash_point, int steps, const std::string& log) {
  std::atomic<int> status = 0;
  run_ranks(kRanks, [&](coll::Communicator& comm) {
    int point = comm.rank() == crash_rank ? crash_point : 0;
    // Numbered points: two commits first, so the point is reached with history on every disk and server.
    if ((crash_point && !write_steps(comm, layout, 0, 2, log)) ||
        !write_steps(comm, layout, point, steps, log))
      status = 3;
  });
  return status;
}

const bool kIsWriter = [] {
  if (const char* args = std::getenv("CKPT_CLUSTER_WRITER")) {
    std::istringstream in(args);
    Layout layout;
    std::string log;
    int rank = 0, point = 0, steps = 0;
    in >> layout.directories[0] >> layout.directories[1] >> layout.servers[0] >> layout.servers[1] >> rank >>
        point >> steps >> log;
    std::_Exit(run_writer(layout, rank, point, steps, log));
  }
  return false;
}();

struct Cluster {
  testing::TempDir root;
  std::array<std::unique_ptr<ReplicaServer>, kNodes> servers;

  Cluster() {
    for (int node = 0; node < kNodes; ++node) start_server(node);
  }
  void start_server(int node) {
    auto server = ReplicaServer::create(ServeOptions{.transport = "tcp", .budget_bytes = 64 << 20});
    ASSERT_TRUE(server) << server.error().describe();
    servers[node] = std::move(*server);
  }
  std::string directory(int node) const { return root.path() + "/node" + std::to_string(node); }
  Layout layout() const {
    Layout layout;
    for (int node = 0; node < kNodes; ++node) {
      layout.directories[node] = directory(node);
      layout.servers[node] = servers[node]->address();
    }
    return layout;
  }
  // The node's disk and its server (with the replicas it held for the other node) are gone; a replacement
  // node starts with an empty disk and an empty server.
  void lose_node(int node) {
    servers[node].reset();
    fs::remove_all(directory(node));
    start_server(node);
  }
};

void check_restore(const Cluster& cluster, int lost, std::uint64_t last_committed, const std::string& what) {
  auto layout = cluster.layout();
  std::array<std::uint64_t, kRanks> restored{};
  run_ranks(kRanks, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(layout.options(comm, 0), state.buffers());
    ASSERT_TRUE(engine) << what << ": " << engine.error().describe();
    auto step = (*engine)->restore_latest();
    ASSERT_TRUE(step) << what << ": rank " << comm.rank() << ": " << step.error().describe();
    restored[comm.rank()] = *step;
    EXPECT_GE(*step, last_committed) << what << ": rank " << comm.rank();
    EXPECT_TRUE(state.matches(seed(*step, comm.rank())))
        << what << ": rank " << comm.rank() << " step " << *step << " does not restore bit-exactly";
    if (node_of(comm.rank()) == lost) {
      EXPECT_EQ((*engine)->restored_from(), "replica at " + layout.servers[(lost + 1) % kNodes])
          << what << ": rank " << comm.rank();
    }
  });
  for (int rank = 1; rank < kRanks; ++rank) EXPECT_EQ(restored[rank], restored[0]) << what;
}

TEST(CkptClusterCrash, ANodeLostAtRandomMomentsRestoresFromSurvivorsAndReplicas) {
  // The agreement steps back over a step that one directory committed and the other did not.
  rdmakit::testing::expect_warning("trying step");
  rdmakit::testing::expect_warning("skipping");
  Cluster cluster;
  std::string log = cluster.root.path() + "/writer.log";
  // Node 1's leader (rank 2) dies between the directories' commit records, and during its shard.
  const std::vector<int> points = {
      static_cast<int>(detail::CrashPoint::MidData),
      static_cast<int>(detail::CrashPoint::ShardsReported),
      static_cast<int>(detail::CrashPoint::BeforeRename),
      static_cast<int>(detail::CrashPoint::AfterRename),
      static_cast<int>(detail::CrashPoint::AfterCommit),
  };
  std::mt19937 random(2718);
  const int timed_rounds = rdmakit::testing::scaled_repeats(10, 3);
  const int rounds = static_cast<int>(points.size()) + timed_rounds;
  int timed = 0;
  for (int round = 0; round < rounds; ++round) {
    bool at_point = round % 3 == 2 && round / 3 < static_cast<int>(points.size());
    int point = at_point ? points[static_cast<std::size_t>(round / 3)] : 0;
    auto layout = cluster.layout();
    auto logged_before = testing::log_size(log);
    std::string args = layout.directories[0] + " " + layout.directories[1] + " " + layout.servers[0] + " " +
                       layout.servers[1] + " 2 " + std::to_string(point) + " " + (point ? "1" : "1000") +
                       " " + log;
    pid_t pid = testing::spawn_self_as_writer("CKPT_CLUSTER_WRITER", args);
    ASSERT_GT(pid, 0);
    if (!at_point) {
      ++timed;
      ASSERT_TRUE(testing::kill_after_a_commit(pid, log, logged_before, random, 120'000))
          << "round " << round << ": the writer logged no commit before it was killed";
    }
    int status = 0;
    std::string what = "round " + std::to_string(round) + " point " + std::to_string(point);
    ASSERT_TRUE(testing::reaped_killed(pid, status)) << what << ": writer exited with status " << status;
    int lost = round % kNodes;
    cluster.lose_node(lost);
    check_restore(cluster, lost, testing::last_logged(log), what + " lost node " + std::to_string(lost));
    if (::testing::Test::HasFailure()) break;
  }
  std::printf(
      "4 ranks on 2 nodes killed %d times at numbered points, %d at random times, a node lost each "
      "time; newest committed step %llu\n",
      rounds - timed, timed, static_cast<unsigned long long>(testing::last_logged(log)));
}

}  // namespace
}  // namespace rdmakit::ckpt
