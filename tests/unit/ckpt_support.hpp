// Helpers shared by the checkpoint tests written after the first slice: a temporary directory, and state
// whose contents are a function of a seed, in buffers of odd sizes so chunks and buffers do not line up.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
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

struct PatternState {
  explicit PatternState(std::size_t scale = 1) : a(1'000'003 * scale), b(600'000 * scale), c(77) {}
  std::vector<unsigned char> a, b, c;

  void fill(std::uint64_t seed) {
    auto s = static_cast<std::uint32_t>(seed * 3);
    rdmakit::testing::fill_pattern(a.data(), a.size(), s);
    rdmakit::testing::fill_pattern(b.data(), b.size(), s + 1);
    rdmakit::testing::fill_pattern(c.data(), c.size(), s + 2);
  }
  bool matches(std::uint64_t seed) const {
    auto s = static_cast<std::uint32_t>(seed * 3);
    return rdmakit::testing::find_pattern_mismatch(a.data(), a.size(), s) == a.size() &&
           rdmakit::testing::find_pattern_mismatch(b.data(), b.size(), s + 1) == b.size() &&
           rdmakit::testing::find_pattern_mismatch(c.data(), c.size(), s + 2) == c.size();
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
// between the threads: the engine's collectives are a few bytes).
inline void run_ranks(int n, const std::function<void(coll::Communicator&)>& body) {
  auto store = bootstrap::make_memory_store();
  coll::CommOptions options{.network_transport = "tcp",
                            .local_transport = "tcp",
                            .timeout = std::chrono::milliseconds(20000),
                            .bootstrap_timeout = std::chrono::milliseconds(20000)};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto comm = coll::Communicator::create(store, r, n, options);
      ASSERT_TRUE(comm.has_value()) << "rank " << r << ": " << comm.error().describe();
      body(**comm);
    });
  for (auto& t : threads) t.join();
}

}  // namespace rdmakit::ckpt::testing
