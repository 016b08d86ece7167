// `rdmakit-ckpt bench-cluster DIR [MiB] [rounds]`: 4 ranks (threads, one communicator each) as 2 nodes of 2,
// each node with its own directory under DIR and its own replica server (in this process), each rank's
// replica on the other node's server. Per round: a multi-rank snapshot (its stall, and a single rank's
// stall of the same state for comparison), the replica push's bandwidth, then three restores timed per
// rank: everything from disk, and after node 1 is lost (its directory deleted, its server replaced),
// node 0's ranks from their disks and node 1's from the replicas. One JSON object per round.
#include "ckpt_bench_cluster.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "rdmakit/bootstrap.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/ckpt/serve.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace {

using namespace rdmakit;

constexpr int kRanks = 4;
constexpr int kNodes = 2;
int node_of(int rank) { return rank / (kRanks / kNodes); }

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Cluster {
  std::string root;
  std::size_t bytes = 0;
  std::array<std::unique_ptr<ckpt::ReplicaServer>, kNodes> servers;
  std::array<std::vector<unsigned char>, kRanks> states;

  std::string directory(int node) const { return root + "/node" + std::to_string(node); }
  Result<void> start_server(int node) {
    auto server = ckpt::ReplicaServer::create(
        ckpt::ServeOptions{.budget_bytes = 2 * (kRanks / kNodes) * (bytes + (8u << 20))});
    if (!server) return std::unexpected(server.error());
    servers[node] = std::move(*server);
    return {};
  }
  ckpt::EngineOptions options(coll::Communicator& comm) const {
    int node = node_of(comm.rank());
    return ckpt::EngineOptions{.directory = directory(node),
                               .keep = 2,
                               .communicator = &comm,
                               .replica = servers[(node + 1) % kNodes]->address()};
  }
  std::vector<ckpt::Buffer> buffers(int rank) {
    return {{"state", states[rank].data(), states[rank].size(), ckpt::DType::U8, {}}};
  }
};

// Runs body on every rank (a thread each, a communicator each over one in-memory store); the first error.
Result<void> on_ranks(const std::function<Result<void>(coll::Communicator&)>& body) {
  auto store = bootstrap::make_memory_store();
  std::mutex mutex;
  Result<void> first;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      auto comm = coll::Communicator::create(store, r, kRanks, {.timeout = std::chrono::seconds(120)});
      Result<void> outcome = comm ? body(**comm) : Result<void>(std::unexpected(comm.error()));
      std::lock_guard lock(mutex);
      if (!outcome && first) first = outcome;
    });
  for (auto& t : threads) t.join();
  return first;
}

struct Timings {
  std::array<double, kRanks> seconds{};
  std::array<std::string, kRanks> sources;
  double max(int from = 0, int to = kRanks) const { return *std::max_element(&seconds[from], &seconds[to]); }
};

// Every rank creates an engine and restores the newest step; per-rank time of restore_latest().
Result<Timings> restore_all(Cluster& cluster, std::uint64_t expected) {
  Timings timings;
  auto ok = on_ranks([&](coll::Communicator& comm) -> Result<void> {
    auto engine = ckpt::Engine::create(cluster.options(comm), cluster.buffers(comm.rank()));
    if (!engine) return std::unexpected(engine.error());
    auto start = std::chrono::steady_clock::now();
    auto step = (*engine)->restore_latest();
    timings.seconds[comm.rank()] = since(start);
    if (!step) return std::unexpected(step.error());
    if (*step != expected)
      return fail(Errc::ProtocolError,
                  "restored step " + std::to_string(*step) + ", expected " + std::to_string(expected));
    timings.sources[comm.rank()] = (*engine)->restored_from();
    return {};
  });
  if (!ok) return std::unexpected(ok.error());
  return timings;
}

}  // namespace

int bench_cluster(const std::string& dir, std::size_t mib, int rounds) {
  auto report = [](const Error& e) {
    std::fprintf(stderr, "rdmakit-ckpt bench-cluster: %s\n", e.describe().c_str());
    return 1;
  };
  Cluster cluster{.root = dir, .bytes = mib << 20};
  for (auto& s : cluster.states) s.assign(cluster.bytes, 0);
  for (int node = 0; node < kNodes; ++node)
    if (auto ok = cluster.start_server(node); !ok) return report(ok.error());
  double gb = static_cast<double>(cluster.bytes) / 1e9;
  for (int round = 1; round <= rounds; ++round) {
    auto step = static_cast<std::uint64_t>(round);
    // The same state size on one rank alone: the snapshot stall a multi-rank one is compared with.
    double single_stall = 0;
    {
      auto engine = ckpt::Engine::create({.directory = dir + "/single", .keep = 2}, cluster.buffers(0));
      if (!engine) return report(engine.error());
      auto start = std::chrono::steady_clock::now();
      if (auto ok = (*engine)->snapshot(step); !ok) return report(ok.error());
      single_stall = since(start);
      if (auto ok = (*engine)->wait_persisted(); !ok) return report(ok.error());
    }
    std::array<double, kRanks> stall{}, push{}, persist{};
    auto wrote = on_ranks([&](coll::Communicator& comm) -> Result<void> {
      auto& state = cluster.states[comm.rank()];
      std::fill(state.begin(), state.end(), static_cast<unsigned char>(round * 10 + comm.rank()));
      auto engine = ckpt::Engine::create(cluster.options(comm), cluster.buffers(comm.rank()));
      if (!engine) return std::unexpected(engine.error());
      auto start = std::chrono::steady_clock::now();
      if (auto ok = (*engine)->snapshot(step); !ok) return ok;
      stall[comm.rank()] = since(start);
      auto persisted = (*engine)->wait_persisted();
      if (!persisted) return std::unexpected(persisted.error());
      if (!persisted->replicated) return fail(Errc::Unavailable, "the replica was not pushed");
      push[comm.rank()] = persisted->replica_seconds;
      persist[comm.rank()] = persisted->total_seconds;
      return {};
    });
    if (!wrote) return report(wrote.error());
    auto from_disk = restore_all(cluster, step);
    if (!from_disk) return report(from_disk.error());
    // Node 1 is lost: its disk, and its server with the replicas it held for node 0.
    std::filesystem::remove_all(cluster.directory(1));
    cluster.servers[1].reset();
    if (auto ok = cluster.start_server(1); !ok) return report(ok.error());
    auto after_loss = restore_all(cluster, step);
    if (!after_loss) return report(after_loss.error());
    if (after_loss->sources[2].rfind("replica at ", 0) != 0)
      return report(Error(Errc::ProtocolError, "rank 2 did not restore from its replica"));
    std::printf(
        "{\"bytes_per_rank\": %zu, \"snapshot_stall_ms\": %.2f, \"single_rank_stall_ms\": %.2f, "
        "\"persist_ms\": %.1f, \"replica_push_GBps\": %.3f, \"restore_all_from_disk_ms\": %.1f, "
        "\"recovery_ms\": %.1f, \"survivors_from_disk_ms\": %.1f, \"lost_node_from_replicas_ms\": %.1f}\n",
        cluster.bytes, *std::max_element(stall.begin(), stall.end()) * 1e3, single_stall * 1e3,
        *std::max_element(persist.begin(), persist.end()) * 1e3,
        gb / *std::max_element(push.begin(), push.end()), from_disk->max() * 1e3, after_loss->max() * 1e3,
        after_loss->max(0, 2) * 1e3, after_loss->max(2, 4) * 1e3);
    std::fflush(stdout);
  }
  return 0;
}
