// Hygiene over 1,000 snapshots: resident memory, open file descriptors and disk usage printed after a
// warm-up and at the end, and asserted flat; staging at most 1.25x the state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ckpt_support.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

struct Usage {
  std::size_t rss_bytes = 0;
  std::size_t open_fds = 0;
  std::size_t disk_bytes = 0;  // allocated blocks of every file under the directory
  std::size_t entries = 0;     // files and directories under it
};

Usage measure(const std::string& dir) {
  Usage u;
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  u.rss_bytes = resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++u.open_fds;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    ++u.entries;
    struct stat st {};
    if (entry.is_regular_file() && ::stat(entry.path().c_str(), &st) == 0)
      u.disk_bytes += static_cast<std::size_t>(st.st_blocks) * 512;
  }
  return u;
}

void print(const char* when, const Usage& u) {
  std::printf("%-6s rss %8.2f MiB  fds %3zu  disk %8.2f MiB in %zu entries\n", when,
              static_cast<double>(u.rss_bytes) / (1 << 20), u.open_fds,
              static_cast<double>(u.disk_bytes) / (1 << 20), u.entries);
}

void snapshot_many(Engine& engine, testing::PatternState& state, std::uint64_t first, std::uint64_t count) {
  for (auto step = first; step < first + count; ++step) {
    state.c[0] = static_cast<unsigned char>(step);  // a change per step, cheap
    ASSERT_TRUE(engine.snapshot(step));
    ASSERT_TRUE(engine.wait_snapshot());
  }
  ASSERT_TRUE(engine.wait_persisted());
}

TEST(CkptHygiene, ThousandSnapshotsKeepMemoryFdsAndDiskFlat) {
  // On tmpfs where there is one: an fsync on a disk costs milliseconds, and 1,000 commits hold four each.
  testing::TempDir dir(fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path());
  ::rdmakit::testing::expect_warning("O_DIRECT refused");  // tmpfs before Linux 6.6
  testing::PatternState state;
  state.fill(1);
  auto options = testing::test_options(dir.path());
  options.lazy = true;
  auto engine = Engine::create(options, state.buffers());
  ASSERT_TRUE(engine);
  EXPECT_LE(static_cast<double>((*engine)->staging_bytes()), 1.25 * static_cast<double>(state.bytes()));
  snapshot_many(**engine, state, 1, 20);  // warm-up: staging faulted in, keep-last-K reached
  auto start = measure(dir.path());
  print("start", start);
  snapshot_many(**engine, state, 21, 1000);
  auto end = measure(dir.path());
  print("end", end);
  EXPECT_EQ(end.open_fds, start.open_fds);
  EXPECT_EQ(end.entries, start.entries);
  EXPECT_EQ(end.disk_bytes, start.disk_bytes);
  // The heap may settle a little (allocator arenas); a leak of even 1 KiB per snapshot would show as 1 MiB.
  // AddressSanitizer keeps freed memory in quarantine (and LeakSanitizer checks leaks at exit instead).
  if (!kAddressSanitizer) {
    EXPECT_LT(end.rss_bytes, start.rss_bytes + (1u << 20))
        << "resident memory grew by " << (end.rss_bytes - start.rss_bytes) << " bytes";
  }
  state.fill(0);
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 1020u);
  EXPECT_EQ(state.c[0], static_cast<unsigned char>(1020));
}

}  // namespace
}  // namespace rdmakit::ckpt
