// rdmakit-ckpt: look at checkpoints on disk, and measure the engine.
//
//   rdmakit-ckpt list DIR                    committed checkpoints, newest first
//   rdmakit-ckpt verify CKPT|DIR             every chunk checksum (DIR: the newest checkpoint; in one node's
//                                            directory of a node-local checkpoint: that node's shards)
//   rdmakit-ckpt show CKPT|DIR               the manifest
//   rdmakit-ckpt export CKPT|DIR NAME OUT.npy   one tensor in numpy's format
//   rdmakit-ckpt bench DIR [MiB] [rounds]    snapshot stall vs memcpy, persist and restore bandwidth
//   rdmakit-ckpt bench-lazy DIR [MiB] [rounds] [compute]   lazy mode's stall at wait_snapshot()
//   rdmakit-ckpt bench-replica DIR ADDR [MiB] [rounds]   the peer-memory replica's push bandwidth
//   rdmakit-ckpt bench-cluster DIR [MiB] [rounds]   4 ranks on 2 "nodes": stall, replica push, recovery
//   rdmakit-ckpt serve [--listen ADDR] [--budget MiB] [--persist DIR] [--keep K] [--max-connections N]
//                      [--max-rank MiB]      hold engines' replicas in memory (EngineOptions::replica);
//                                            peers prove RDMAKIT_JOB_SECRET (loopback: the per-user secret)
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt_bench_cluster.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/ckpt/serve.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace ckpt = rdmakit::ckpt;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: rdmakit-ckpt list DIR\n"
               "       rdmakit-ckpt verify CKPT|DIR\n"
               "       rdmakit-ckpt show CKPT|DIR\n"
               "       rdmakit-ckpt export CKPT|DIR NAME OUT.npy\n"
               "       rdmakit-ckpt bench DIR [MiB=256] [rounds=3]\n"
               "       rdmakit-ckpt bench-lazy DIR [MiB=256] [rounds=3] [compute=1.5 x memcpy]\n"
               "       rdmakit-ckpt bench-replica DIR ADDR [MiB=256] [rounds=3]\n"
               "       rdmakit-ckpt bench-cluster DIR [MiB=256] [rounds=3]\n"
               "       rdmakit-ckpt serve [--listen ADDR] [--budget MiB=1024] [--persist DIR] [--keep K=2]\n"
               "                          [--max-connections N=64] [--max-rank MiB=budget]\n"
               "         (peers must prove RDMAKIT_JOB_SECRET; without it only loopback, for this user)\n");
  return 2;
}

int report(const rdmakit::Error& error) {
  std::fprintf(stderr, "rdmakit-ckpt: %s\n", error.describe().c_str());
  return 1;
}

// A numeric argument: the whole text must be a number of type T, else this says so (nullopt).
template <class T>
std::optional<T> number(const std::string& text, const char* what) {
  T value{};
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || stop != end) {
    std::fprintf(stderr, "rdmakit-ckpt: %s must be a number, got '%s'\n", what, text.c_str());
    return std::nullopt;
  }
  return value;
}

// A checkpoint directory itself, or a directory of checkpoints (then its newest).
rdmakit::Result<std::string> resolve(const std::string& path) {
  if (std::filesystem::exists(path + "/MANIFEST")) return path;
  auto list = ckpt::list_checkpoints(path);
  if (!list) return std::unexpected(list.error());
  if (list->empty()) return rdmakit::fail(rdmakit::Errc::NotFound, "no checkpoint in " + path);
  return list->front().path;
}

int list(const std::string& dir) {
  auto found = ckpt::list_checkpoints(dir);
  if (!found) return report(found.error());
  std::printf("%-20s %-8s %14s %8s  %s\n", "step", "rank", "bytes", "tensors", "path");
  for (const auto& info : *found) {
    std::uint64_t bytes = 0;
    for (const auto& f : info.manifest.files) bytes += f.size;
    if (!info.problem.empty())
      std::printf("%-20llu %-8s %14s %8s  %s  BROKEN: %s\n", static_cast<unsigned long long>(info.step), "-",
                  "-", "-", info.path.c_str(), info.problem.c_str());
    else
      std::printf("%-20llu %u/%-6u %14llu %8zu  %s\n", static_cast<unsigned long long>(info.step),
                  info.manifest.rank, info.manifest.world_size, static_cast<unsigned long long>(bytes),
                  info.manifest.tensors.size(), info.path.c_str());
  }
  return 0;
}

int verify(const std::string& path) {
  auto target = resolve(path);
  if (!target) return report(target.error());
  bool tty = ::isatty(STDERR_FILENO);
  auto bar = [&](std::uint64_t done, std::uint64_t total) {
    if (!tty || total == 0) return;
    int filled = static_cast<int>(40 * done / total);
    std::fprintf(stderr, "\r[%-40.*s] %3d%%", filled, "########################################",
                 static_cast<int>(100 * done / total));
  };
  auto found = ckpt::verify_node_checkpoint(*target, bar);
  if (tty) std::fprintf(stderr, "\n");
  if (!found) return report(found.error());
  const auto& m = found->manifest;
  if (found->elsewhere.empty()) {
    std::printf("%s: OK (step %llu, %zu chunks)\n", target->c_str(), static_cast<unsigned long long>(m.step),
                m.chunks.size());
    return 0;
  }
  // One node's directory of a node-local checkpoint: its own ranks' shards checked, the rest named.
  auto ranks = [](const std::vector<std::uint32_t>& files) {
    std::string text;
    for (auto f : files) text += (text.empty() ? "" : ", ") + std::to_string(f);
    return text;
  };
  std::size_t chunks = 0;
  for (const auto& c : m.chunks)
    chunks += std::find(found->verified.begin(), found->verified.end(), c.file) != found->verified.end();
  std::printf(
      "%s: OK for the shards in this directory (step %llu: rank(s) %s, %zu chunks); rank(s) %s of %u "
      "are not here (another node's directory: verify them there)\n",
      target->c_str(), static_cast<unsigned long long>(m.step), ranks(found->verified).c_str(), chunks,
      ranks(found->elsewhere).c_str(), static_cast<unsigned>(m.files.size()));
  return 0;
}

int show(const std::string& path) {
  auto target = resolve(path);
  if (!target) return report(target.error());
  auto manifest = ckpt::read_manifest(*target);
  if (!manifest) return report(manifest.error());
  std::printf("%s\n%s", target->c_str(), ckpt::describe_manifest(*manifest).c_str());
  return 0;
}

int export_npy(const std::string& path, const std::string& name, const std::string& out) {
  auto target = resolve(path);
  if (!target) return report(target.error());
  if (auto ok = ckpt::export_npy(*target, name, out); !ok) return report(ok.error());
  std::printf("%s: wrote '%s' to %s\n", target->c_str(), name.c_str(), out.c_str());
  return 0;
}

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What every bench subcommand measures on: a state of `mib` MiB in 8 buffers (as a model's tensors), a
// second copy of it as memcpy's target (touched once, so no page faults are timed), and an engine whose
// staging was faulted in by one untimed checkpoint.
struct BenchState {
  std::size_t bytes;
  std::vector<std::vector<unsigned char>> parts;
  std::vector<unsigned char> copy;
  std::unique_ptr<ckpt::Engine> engine;

  static rdmakit::Result<BenchState> create(std::size_t mib, ckpt::EngineOptions options) {
    constexpr std::size_t kParts = 8;
    BenchState b{(mib << 20) / kParts * kParts, {}, {}, nullptr};
    b.parts.assign(kParts, std::vector<unsigned char>(b.bytes / kParts, 1));
    b.copy.assign(b.bytes, 0);
    std::vector<ckpt::Buffer> buffers;
    for (std::size_t i = 0; i < kParts; ++i)
      buffers.push_back(
          {"part" + std::to_string(i), b.parts[i].data(), b.parts[i].size(), ckpt::DType::U8, {}});
    auto engine = ckpt::Engine::create(std::move(options), buffers);
    if (!engine) return std::unexpected(engine.error());
    b.engine = std::move(*engine);
    if (auto ok = b.engine->snapshot(0); !ok) return std::unexpected(ok.error());
    if (auto ok = b.engine->wait_persisted(); !ok) return std::unexpected(ok.error());
    return b;
  }
  // Changes the state (as a training step would) and times a plain memcpy of all of it.
  double touch_and_memcpy(int round) {
    for (auto& p : parts) p[static_cast<std::size_t>(round) % p.size()] = static_cast<unsigned char>(round);
    auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < parts.size(); ++i)
      std::memcpy(copy.data() + i * parts[i].size(), parts[i].data(), parts[i].size());
    return since(start);
  }
  double gb() const { return static_cast<double>(bytes) / 1e9; }
};

// Eager snapshots: the stall vs memcpy, the time until the checkpoint is durable (save), the persist
// bandwidth, verify alone (read + checksums) and restore (verify + load). One JSON object per round.
int bench(const std::string& dir, std::size_t mib, int rounds) {
  auto b = BenchState::create(mib, {.directory = dir, .keep = 2});
  if (!b) return report(b.error());
  auto& engine = *b->engine;
  for (int round = 1; round <= rounds; ++round) {
    double memcpy_s = b->touch_and_memcpy(round);
    auto start = std::chrono::steady_clock::now();
    if (auto ok = engine.snapshot(static_cast<std::uint64_t>(round)); !ok) return report(ok.error());
    double stall_s = since(start);
    auto persisted = engine.wait_persisted();
    if (!persisted) return report(persisted.error());
    double save_s = since(start);
    start = std::chrono::steady_clock::now();
    if (auto ok = ckpt::verify_checkpoint(persisted->path); !ok) return report(ok.error());
    double verify_s = since(start);
    start = std::chrono::steady_clock::now();
    auto restored = engine.restore_latest();
    if (!restored) return report(restored.error());
    double restore_s = since(start);
    std::printf(
        "{\"bytes\": %zu, \"memcpy_ms\": %.2f, \"snapshot_stall_ms\": %.2f, \"stall_ratio\": %.3f, "
        "\"save_ms\": %.1f, \"write_GBps\": %.3f, \"persist_GBps\": %.3f, \"verify_GBps\": %.3f, "
        "\"restore_GBps\": %.3f, \"direct_io\": %s}\n",
        b->bytes, memcpy_s * 1e3, stall_s * 1e3, stall_s / memcpy_s, save_s * 1e3,
        b->gb() / persisted->write_seconds, b->gb() / persisted->total_seconds, b->gb() / verify_s,
        b->gb() / restore_s, persisted->direct_io ? "true" : "false");
    std::fflush(stdout);
  }
  return 0;
}

// Lazy mode: snapshot(), a simulated forward/backward pass (a sleep of `compute` x the memcpy time: the
// CPU is idle, as while a GPU computes), then wait_snapshot(), whose stall is what training pays.
int bench_lazy(const std::string& dir, std::size_t mib, int rounds, double compute) {
  auto b = BenchState::create(mib, {.directory = dir, .keep = 2, .lazy = true});
  if (!b) return report(b.error());
  auto& engine = *b->engine;
  for (int round = 1; round <= rounds; ++round) {
    double memcpy_s = b->touch_and_memcpy(round);
    auto start = std::chrono::steady_clock::now();
    if (auto ok = engine.snapshot(static_cast<std::uint64_t>(round)); !ok) return report(ok.error());
    double snapshot_s = since(start);
    std::this_thread::sleep_for(std::chrono::duration<double>(compute * memcpy_s));
    start = std::chrono::steady_clock::now();
    if (auto ok = engine.wait_snapshot(); !ok) return report(ok.error());
    double stall_s = since(start) + snapshot_s;
    if (auto persisted = engine.wait_persisted(); !persisted) return report(persisted.error());
    std::printf(
        "{\"mode\": \"lazy\", \"bytes\": %zu, \"memcpy_ms\": %.2f, \"compute_ms\": %.2f, "
        "\"stall_ms\": %.3f, \"stall_ratio\": %.4f}\n",
        b->bytes, memcpy_s * 1e3, compute * memcpy_s * 1e3, stall_s * 1e3, stall_s / memcpy_s);
    std::fflush(stdout);
  }
  return 0;
}

// The peer-memory replica: each committed checkpoint is also written into `rdmakit-ckpt serve`'s memory
// at `address` (transport: RDMAKIT_TRANSPORT); prints the push's bandwidth per round.
int bench_replica(const std::string& dir, const std::string& address, std::size_t mib, int rounds) {
  auto b = BenchState::create(mib, {.directory = dir, .keep = 2, .replica = address});
  if (!b) return report(b.error());
  for (int round = 1; round <= rounds; ++round) {
    b->touch_and_memcpy(round);
    if (auto ok = b->engine->snapshot(static_cast<std::uint64_t>(round)); !ok) return report(ok.error());
    auto persisted = b->engine->wait_persisted();
    if (!persisted) return report(persisted.error());
    if (!persisted->replicated) return 1;
    std::printf("{\"mode\": \"replica\", \"bytes\": %zu, \"replica_ms\": %.1f, \"replica_GBps\": %.3f}\n",
                b->bytes, persisted->replica_seconds * 1e3, b->gb() / persisted->replica_seconds);
    std::fflush(stdout);
  }
  return 0;
}

volatile std::sig_atomic_t g_stop = 0;

// Serves until SIGINT or SIGTERM; prints its address first (engines pass it as EngineOptions::replica).
int serve(const std::vector<std::string>& args) {
  ckpt::ServeOptions options{.budget_bytes = 1024ull << 20};
  for (std::size_t i = 1; i + 1 < args.size(); i += 2) {
    if (args[i] == "--listen")
      options.listen = args[i + 1];
    else if (args[i] == "--budget") {
      auto mib = number<std::uint64_t>(args[i + 1], "--budget (MiB)");
      if (!mib) return 2;
      options.budget_bytes = *mib << 20;
    } else if (args[i] == "--persist")
      options.persist_directory = args[i + 1];
    else if (args[i] == "--keep") {
      auto keep = number<std::uint32_t>(args[i + 1], "--keep");
      if (!keep) return 2;
      options.keep = *keep;
    } else if (args[i] == "--max-connections") {
      auto n = number<std::uint32_t>(args[i + 1], "--max-connections");
      if (!n) return 2;
      options.max_connections = *n;
    } else if (args[i] == "--max-rank") {
      auto mib = number<std::uint64_t>(args[i + 1], "--max-rank (MiB)");
      if (!mib) return 2;
      options.max_rank_bytes = *mib << 20;
    } else
      return usage();
  }
  if (args.size() % 2 == 0) return usage();
  auto server = ckpt::ReplicaServer::create(options);
  if (!server) return report(server.error());
  std::printf("serving on %s, budget %llu MiB%s%s\n", (*server)->address().c_str(),
              static_cast<unsigned long long>(options.budget_bytes >> 20),
              options.persist_directory.empty() ? "" : ", persisting to ", options.persist_directory.c_str());
  std::fflush(stdout);
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage();
  const auto& command = args[0];
  if (command == "list" && args.size() == 2) return list(args[1]);
  if (command == "verify" && args.size() == 2) return verify(args[1]);
  if (command == "show" && args.size() == 2) return show(args[1]);
  if (command == "export" && args.size() == 4) return export_npy(args[1], args[2], args[3]);
  // The bench subcommands' optional numbers, after their fixed arguments.
  auto at = [&](std::size_t i, const char* fallback) {
    return args.size() > i ? args[i] : std::string(fallback);
  };
  if (command == "bench" && args.size() >= 2 && args.size() <= 4) {
    auto mib = number<std::size_t>(at(2, "256"), "MiB");
    auto rounds = number<int>(at(3, "3"), "rounds");
    return mib && rounds ? bench(args[1], *mib, *rounds) : 2;
  }
  if (command == "serve") return serve(args);
  if (command == "bench-replica" && args.size() >= 3 && args.size() <= 5) {
    auto mib = number<std::size_t>(at(3, "256"), "MiB");
    auto rounds = number<int>(at(4, "3"), "rounds");
    return mib && rounds ? bench_replica(args[1], args[2], *mib, *rounds) : 2;
  }
  if (command == "bench-cluster" && args.size() >= 2 && args.size() <= 4) {
    auto mib = number<std::size_t>(at(2, "256"), "MiB");
    auto rounds = number<int>(at(3, "3"), "rounds");
    return mib && rounds ? bench_cluster(args[1], *mib, *rounds) : 2;
  }
  if (command == "bench-lazy" && args.size() >= 2 && args.size() <= 5) {
    auto mib = number<std::size_t>(at(2, "256"), "MiB");
    auto rounds = number<int>(at(3, "3"), "rounds");
    auto compute = number<double>(at(4, "1.5"), "compute");
    return mib && rounds && compute ? bench_lazy(args[1], *mib, *rounds, *compute) : 2;
  }
  return usage();
}
