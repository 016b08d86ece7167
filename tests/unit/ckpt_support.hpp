// Helpers shared by the checkpoint tests written after the first slice: a temporary directory, and state
// whose contents are a function of a seed, in buffers of odd sizes so chunks and buffers do not line up.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>  // environ

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/bootstrap.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/coll/communicator.hpp"
#include "support/test_support.hpp"

namespace rdmakit::ckpt::testing {

class TempDir {
 public:
  // Under `parent` (default: the temporary directory, ext4 here, where O_DIRECT works).
  explicit TempDir(const std::filesystem::path& parent = std::filesystem::temp_directory_path()) {
    std::string pattern = (parent / "rdmakit-ckpt-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A byte pattern that depends on every bit of the seed. (testing::fill_pattern's does not: its seed only
// reaches bits the byte never takes for seeds below 2^29, so fill(7) and fill(99) write the same bytes.)
inline std::uint8_t seeded_byte(std::size_t i, std::uint64_t seed) {
  std::uint64_t x = (static_cast<std::uint64_t>(i) + 1) ^ (seed * 0xD1B54A32D192ED03ull);
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<std::uint8_t>(x >> 56);
}
inline void fill_seeded(void* data, std::size_t size, std::uint64_t seed) {
  auto* bytes = static_cast<std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = seeded_byte(i, seed);
}
inline std::size_t seeded_mismatch(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i)
    if (bytes[i] != seeded_byte(i, seed)) return i;
  return size;
}

struct PatternState {
  explicit PatternState(std::size_t scale = 1) : a(1'000'003 * scale), b(600'000 * scale), c(77) {}
  std::vector<unsigned char> a, b, c;

  void fill(std::uint64_t seed) {
    fill_seeded(a.data(), a.size(), seed * 3);
    fill_seeded(b.data(), b.size(), seed * 3 + 1);
    fill_seeded(c.data(), c.size(), seed * 3 + 2);
  }
  bool matches(std::uint64_t seed) const {
    return seeded_mismatch(a.data(), a.size(), seed * 3) == a.size() &&
           seeded_mismatch(b.data(), b.size(), seed * 3 + 1) == b.size() &&
           seeded_mismatch(c.data(), c.size(), seed * 3 + 2) == c.size();
  }
  std::size_t bytes() const { return a.size() + b.size() + c.size(); }
  std::vector<Buffer> buffers() {
    return {{"a", a.data(), a.size(), DType::U8, {}},
            {"b", b.data(), b.size(), DType::U8, {}},
            {"c", c.data(), c.size(), DType::U8, {77}}};
  }
};

inline EngineOptions test_options(const std::string& dir) {
  return EngineOptions{
      .directory = dir, .keep = 2, .chunk_bytes = 128 << 10, .io_depth = 4, .copy_threads = 2};
}

// Runs body(comm) on n threads, each a rank with its own communicator over one in-memory store (tcp
// between the threads: the engine's collectives are a few bytes). With ranks_per_host, consecutive ranks
// form "hosts" of that many (CommOptions::host_id), as separate nodes would; else all share this host.
inline void run_ranks(int n, const std::function<void(coll::Communicator&)>& body, int ranks_per_host = 0) {
  auto store = bootstrap::make_memory_store();
  coll::CommOptions options{.network_transport = "tcp",
                            .local_transport = "tcp",
                            .timeout = std::chrono::milliseconds(20000),
                            .bootstrap_timeout = std::chrono::milliseconds(20000)};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r, options]() mutable {
      if (ranks_per_host > 0) options.host_id = "test-host-" + std::to_string(r / ranks_per_host);
      auto comm = coll::Communicator::create(store, r, n, options);
      ASSERT_TRUE(comm.has_value()) << "rank " << r << ": " << comm.error().describe();
      body(**comm);
    });
  for (auto& t : threads) t.join();
}

// The crash tests' writer is the test program itself, re-executed with `variable`=`args` added to its
// environment (read before main, so gtest never starts in the child). Returns its pid, or -1.
inline pid_t spawn_self_as_writer(const std::string& variable, const std::string& args) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(variable + "=" + args);
  std::vector<char*> env;
  for (auto& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  pid_t pid = -1;
  if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, env.data()) != 0) return -1;
  return pid;
}

// The last step a crash test's writer logged as committed (0: none).
inline std::uint64_t last_logged(const std::string& log) {
  std::ifstream in(log);
  std::uint64_t step = 0, last = 0;
  while (in >> step) last = step;
  return last;
}

// The size of a crash test's log (0 when it does not exist yet).
inline std::uintmax_t log_size(const std::string& log) {
  std::error_code ec;
  auto size = std::filesystem::file_size(log, ec);
  return ec ? 0 : size;
}

// Waits until the writer `pid` appended to `log` (grown past `before` bytes): it has committed at least one
// checkpoint in this run, so a kill from now on lands while it persists. False if the writer died first or
// nothing was logged within `limit`.
inline bool wait_for_commit(pid_t pid, const std::string& log, std::uintmax_t before,
                            std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (log_size(log) <= before) {
    siginfo_t info{};  // has it ended? (WNOWAIT: the caller still reaps it)
    if (std::chrono::steady_clock::now() > deadline ||
        ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid == pid)
      return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A writer killed at a random moment while it persists: once it logged a commit after `before`, then
// 0..max_us later. False when it logged none first (it is killed all the same, for the caller to reap).
inline bool kill_after_a_commit(pid_t pid, const std::string& log, std::uintmax_t before,
                                std::mt19937& random, int max_us) {
  bool committed = wait_for_commit(pid, log, before);
  if (committed)
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, max_us)(random)));
  ::kill(pid, SIGKILL);
  return committed;
}

// Reaps the writer; whether SIGKILL ended it (else `status` says how it ended).
inline bool reaped_killed(pid_t pid, int& status) {
  status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

}  // namespace rdmakit::ckpt::testing
