// Crash safety of the multi-rank commit: a writer process running two ranks (threads, each with its own
// communicator and engine over one directory) is killed with SIGKILL at every numbered point of the
// commit, on rank 0 (shard and global commit) and on rank 1 (its shard), and at random moments; after each
// death both ranks restore the same newest checkpoint bit-exactly, no older than the last commit logged.
//
// The writer is this program re-executed with CKPT_GROUP_WRITER set (read before main: gtest never starts).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <sstream>

#include "ckpt/persist.hpp"
#include "ckpt_support.hpp"
#include "rdmakit/ckpt/store.hpp"
#include "support/test_support.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::PatternState;
using testing::run_ranks;

std::uint64_t seed(std::uint64_t step, int rank) { return step * 10 + static_cast<std::uint64_t>(rank); }

EngineOptions options_for(const std::string& dir, coll::Communicator& comm, int crash_point) {
  auto options = testing::test_options(dir);
  options.communicator = &comm;
  options.crash_point = crash_point;
  return options;
}

// One rank of the writer: resume, then commit one step after another; rank 0 appends each committed step
// to the log. Returns false on an unexpected error.
bool write_steps(coll::Communicator& comm, const std::string& dir, int crash_point, int steps,
                 const std::string& log) {
  PatternState state;
  auto engine = Engine::create(options_for(dir, comm, crash_point), state.buffers());
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

// Two commits first (so every point is reached with history on disk), then the run that dies.
int run_writer(const std::string& dir, int crash_rank, int crash_point, int steps, const std::string& log) {
  std::atomic<int> status = 0;
  run_ranks(2, [&](coll::Communicator& comm) {
    int point = comm.rank() == crash_rank ? crash_point : 0;
    if ((crash_point && !write_steps(comm, dir, 0, 2, log)) || !write_steps(comm, dir, point, steps, log))
      status = 3;
  });
  return status;
}

const bool kIsWriter = [] {
  if (const char* args = std::getenv("CKPT_GROUP_WRITER")) {
    std::istringstream in(args);
    std::string dir, log;
    int rank = 0, point = 0, steps = 0;
    in >> dir >> rank >> point >> steps >> log;
    std::_Exit(run_writer(dir, rank, point, steps, log));
  }
  return false;
}();

pid_t spawn_writer(const std::string& args) {
  return testing::spawn_self_as_writer("CKPT_GROUP_WRITER", args);
}
using testing::last_logged;

void check_survivor(const std::string& dir, std::uint64_t last_committed, const std::string& what) {
  std::uint64_t restored[2] = {0, 0};
  run_ranks(2, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(options_for(dir, comm, 0), state.buffers());
    ASSERT_TRUE(engine) << what;
    auto step = (*engine)->restore_latest();
    if (last_committed == 0 && !step) return;
    ASSERT_TRUE(step) << what << ": rank " << comm.rank() << ": " << step.error().describe();
    restored[comm.rank()] = *step;
    EXPECT_GE(*step, last_committed) << what;
    EXPECT_TRUE(state.matches(seed(*step, comm.rank())))
        << what << ": rank " << comm.rank() << " step " << *step << " does not restore bit-exactly";
  });
  EXPECT_EQ(restored[0], restored[1]) << what;
  auto list = list_checkpoints(dir);
  ASSERT_TRUE(list);
  if (last_committed >= 2) {  // keep = 2, and deletion only after a commit
    EXPECT_GE(list->size(), 2u) << what;
  }
  for (const auto& info : *list) {
    EXPECT_TRUE(info.problem.empty()) << what << ": " << info.path << ": " << info.problem;
    EXPECT_EQ(info.manifest.world_size, 2u) << what;
  }
}

TEST(CkptGroupCrash, TwoRanksKilledAtEveryCommitPointAndAtRandomTimes) {
  testing::TempDir dir;
  std::string log = dir.path() + "/writer.log", store = dir.path() + "/ckpt";
  // Every point on rank 0 (shard 1-3, global commit 9, 4-8), the shard points on rank 1.
  std::vector<std::pair<int, int>> points;
  for (int p = 1; p < static_cast<int>(detail::CrashPoint::Count); ++p) points.emplace_back(0, p);
  for (int p = 1; p <= static_cast<int>(detail::CrashPoint::AfterDataFsync); ++p) points.emplace_back(1, p);
  // 24 rounds at numbered points, 24 killed at a random moment (0-40 ms, about one commit round) once the
  // writer logged its first commit of that run, so the kill lands while the two ranks persist.
  // The sanitizer stages run fewer (RDMAKIT_TEST_REPEAT_SCALE), never fewer numbered rounds than points.
  std::mt19937 random(777);
  const int numbered_rounds = rdmakit::testing::scaled_repeats(24, static_cast<int>(points.size()));
  const int timed_rounds = rdmakit::testing::scaled_repeats(24, 4);
  std::vector<bool> timed_round(static_cast<std::size_t>(numbered_rounds), false);
  timed_round.resize(static_cast<std::size_t>(numbered_rounds + timed_rounds), true);
  std::shuffle(timed_round.begin(), timed_round.end(), random);
  int numbered = 0, timed = 0;
  for (std::size_t round = 0; round < timed_round.size(); ++round) {
    bool at_point = !timed_round[round];
    auto [rank, point] = at_point ? points[numbered++ % points.size()] : std::pair{0, 0};
    auto logged_before = testing::log_size(log);
    pid_t pid = spawn_writer(store + " " + std::to_string(rank) + " " + std::to_string(point) + " " +
                             (point ? "1" : "1000") + " " + log);
    ASSERT_GT(pid, 0);
    if (!at_point) {
      ++timed;
      ASSERT_TRUE(testing::kill_after_a_commit(pid, log, logged_before, random, 40'000))
          << "round " << round << ": the writer logged no commit before it was killed";
    }
    int status = 0;
    std::string what = "round " + std::to_string(round) + " rank " + std::to_string(rank) + " point " +
                       std::to_string(point);
    ASSERT_TRUE(testing::reaped_killed(pid, status)) << what << ": writer exited with status " << status;
    check_survivor(store, last_logged(log), what);
    if (::testing::Test::HasFailure()) break;
  }
  std::printf(
      "2 ranks killed %d times at numbered points, %d at random times during persist; newest committed step "
      "%llu\n",
      numbered, timed, static_cast<unsigned long long>(last_logged(log)));
}

}  // namespace
}  // namespace rdmakit::ckpt
