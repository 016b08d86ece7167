// Many ranks, one checkpoint: threads as ranks, each with its own communicator and engine over one shared
// directory. Rank 0 commits only when every shard is durable; every rank restores the same step; another
// world size is refused; a rank whose shard fails fails the checkpoint everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "ckpt/group.hpp"
#include "ckpt/manifest.hpp"
#include "ckpt_support.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::PatternState;
using testing::run_ranks;
using testing::TempDir;

// Each rank's state differs: seed = step * 10 + rank.
std::uint64_t seed(std::uint64_t step, int rank) { return step * 10 + static_cast<std::uint64_t>(rank); }

EngineOptions group_options(const std::string& dir, coll::Communicator& comm) {
  auto options = testing::test_options(dir);
  options.communicator = &comm;
  return options;
}

// Commits `steps` checkpoints with `n` ranks.
void commit_steps(const std::string& dir, int n, std::uint64_t first, std::uint64_t last) {
  run_ranks(n, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(group_options(dir, comm), state.buffers());
    ASSERT_TRUE(engine) << engine.error().describe();
    for (auto step = first; step <= last; ++step) {
      state.fill(seed(step, comm.rank()));
      ASSERT_TRUE((*engine)->snapshot(step));
      auto report = (*engine)->wait_persisted();
      ASSERT_TRUE(report) << "rank " << comm.rank() << ": " << report.error().describe();
      EXPECT_EQ(report->path, dir + "/" + detail::checkpoint_name(step));
    }
  });
}

TEST(CkptGroup, MergeAndViewRoundTrip) {
  auto shard = [](std::uint32_t rank, std::uint64_t bytes) {
    return Manifest{.step = 5,
                    .rank = rank,
                    .world_size = 2,
                    .chunk_bytes = 4096,
                    .files = {FileEntry{detail::data_file_name(rank), bytes}},
                    .tensors = {TensorEntry{"w", DType::U8, {}, 0, 0, bytes}},
                    .chunks = {ChunkEntry{0, 0, 4096, 1 + rank}, ChunkEntry{0, 4096, bytes - 4096, 3}}};
  };
  std::vector<Manifest> shards{shard(0, 5000), shard(1, 6000)};
  auto global = detail::merge_shards(shards);
  ASSERT_TRUE(global) << global.error().describe();
  auto decoded = detail::decode_manifest(detail::encode_manifest(*global));  // same tensor name, two files
  ASSERT_TRUE(decoded) << decoded.error().describe();
  for (std::uint32_t r = 0; r < 2; ++r) {
    auto view = detail::shard_view(*decoded, r);
    ASSERT_TRUE(view);
    EXPECT_EQ(detail::encode_manifest(*view), detail::encode_manifest(shards[r]));
  }
  EXPECT_FALSE(detail::shard_view(*decoded, 2));
  shards[1].step = 6;  // a shard of another checkpoint left in the directory
  EXPECT_FALSE(detail::merge_shards(shards));
  shards[1] = shard(0, 6000);  // a rank claiming another's place
  EXPECT_FALSE(detail::merge_shards(shards));
}

TEST(CkptGroup, TwoRanksCommitOneCheckpointAndRestoreTheirShards) {
  TempDir dir;
  commit_steps(dir.path(), 2, 1, 3);
  auto list = list_checkpoints(dir.path());
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);  // keep = 2
  EXPECT_EQ(list->front().manifest.world_size, 2u);
  EXPECT_EQ(list->front().manifest.files.size(), 2u);
  EXPECT_TRUE(verify_checkpoint(list->front().path));
  for (const auto& entry : fs::directory_iterator(dir.path()))  // no temporary directory left
    EXPECT_TRUE(entry.path().filename().string().starts_with("ckpt-")) << entry.path();
  run_ranks(2, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(group_options(dir.path(), comm), state.buffers());
    ASSERT_TRUE(engine);
    auto step = (*engine)->restore_latest();
    ASSERT_TRUE(step) << step.error().describe();
    EXPECT_EQ(*step, 3u);
    EXPECT_TRUE(state.matches(seed(3, comm.rank()))) << "rank " << comm.rank();
  });
}

// Lazy mode under a communicator: the copy runs in the background, then the same group commit.
TEST(CkptGroup, LazyRanksCommitTheStateAsOfSnapshot) {
  TempDir dir;
  run_ranks(2, [&](coll::Communicator& comm) {
    PatternState state;
    auto options = group_options(dir.path(), comm);
    options.lazy = true;
    auto engine = Engine::create(options, state.buffers());
    ASSERT_TRUE(engine);
    state.fill(seed(4, comm.rank()));
    ASSERT_TRUE((*engine)->snapshot(4));
    ASSERT_TRUE((*engine)->wait_snapshot());
    state.fill(seed(40, comm.rank()));
    ASSERT_TRUE((*engine)->wait_persisted());
    ASSERT_EQ((*engine)->restore_latest().value_or(0), 4u);
    EXPECT_TRUE(state.matches(seed(4, comm.rank())));
  });
}

// Rank 0 cannot create the directory: every rank's create fails at once, rank 1 naming rank 0.
// Rank 1's directory (its node's own) cannot be made: every rank's create fails, rank 1 with its own cause
// and rank 0 saying another rank could not prepare its directory.
TEST(CkptGroup, CreateFailsOnEveryRankWhenOneCannotPrepare) {
  TempDir dir;
  { std::ofstream(dir.path() + "/file") << "x"; }
  run_ranks(2, [&](coll::Communicator& comm) {
    PatternState state;
    auto where = comm.rank() == 1 ? dir.path() + "/file/sub" : dir.path() + "/node0";
    auto engine = Engine::create(group_options(where, comm), state.buffers());
    ASSERT_FALSE(engine) << "rank " << comm.rank();
    auto expected = comm.rank() == 1 ? "file/sub" : "another rank could not prepare its directory";
    EXPECT_NE(engine.error().message().find(expected), std::string::npos) << engine.error().message();
  });
}

TEST(CkptGroup, OtherWorldSizeRefusedOnEveryRank) {
  TempDir dir;
  commit_steps(dir.path(), 2, 1, 1);
  PatternState state;
  auto single = Engine::create(testing::test_options(dir.path()), state.buffers());
  ASSERT_TRUE(single);
  auto step = (*single)->restore_latest();
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().code(), Errc::InvalidArgument);
  EXPECT_NE(step.error().message().find("2 ranks, this one has 1"), std::string::npos)
      << step.error().message();
  run_ranks(3, [&](coll::Communicator& comm) {
    PatternState mine;
    auto engine = Engine::create(group_options(dir.path(), comm), mine.buffers());
    ASSERT_TRUE(engine);
    auto refused = (*engine)->restore_latest();
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message().find("resharding is not supported"), std::string::npos);
  });
}

// Rank 1's shard of step 2 is damaged: rank 0's shard verifies, yet both ranks restore step 1.
TEST(CkptGroup, DamagedShardMakesEveryRankStepBack) {
  TempDir dir;
  commit_steps(dir.path(), 2, 1, 2);
  {
    std::fstream data(dir.path() + "/" + detail::checkpoint_name(2) + "/" + detail::data_file_name(1),
                      std::ios::in | std::ios::out | std::ios::binary);
    data.seekp(777);
    data.put('\x5a' ^ static_cast<char>(data.peek()));
  }
  ::rdmakit::testing::expect_warning("skipping");
  run_ranks(2, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(group_options(dir.path(), comm), state.buffers());
    ASSERT_TRUE(engine);
    auto step = (*engine)->restore_latest();
    ASSERT_TRUE(step) << step.error().describe();
    EXPECT_EQ(*step, 1u) << "rank " << comm.rank();
    EXPECT_TRUE(state.matches(seed(1, comm.rank())));
  });
}

// Subset restore under a communicator: each rank names its own buffers and only those are written; a
// rank naming an unknown buffer makes every rank refuse before any reads (rank 0, whose list was good,
// leaves its buffers untouched and does not wait for a vote rank 1 never casts), and the group goes on.
TEST(CkptGroup, SubsetRestoreIsCollectiveAndOneRanksBadListStopsEveryRank) {
  TempDir dir;
  commit_steps(dir.path(), 2, 1, 1);
  run_ranks(2, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(group_options(dir.path(), comm), state.buffers());
    ASSERT_TRUE(engine);
    auto sentinel = [&] {
      for (auto* v : {&state.a, &state.b, &state.c}) std::fill(v->begin(), v->end(), 0xA5);
    };
    auto untouched = [](const std::vector<unsigned char>& v) {
      return std::all_of(v.begin(), v.end(), [](unsigned char x) { return x == 0xA5; });
    };
    const auto rank = comm.rank();
    sentinel();
    auto mine = rank == 0 ? std::vector<std::string>{"b"} : std::vector<std::string>{"a", "c"};
    ASSERT_EQ((*engine)->restore_latest(mine).value_or(0), 1u) << "rank " << rank;
    EXPECT_EQ(untouched(state.a), rank == 0);
    EXPECT_EQ(untouched(state.b), rank == 1);
    EXPECT_EQ(untouched(state.c), rank == 0);
    if (rank == 0)
      EXPECT_EQ(testing::seeded_mismatch(state.b.data(), state.b.size(), seed(1, 0) * 3 + 1), state.b.size());
    else
      EXPECT_EQ(testing::seeded_mismatch(state.a.data(), state.a.size(), seed(1, 1) * 3), state.a.size());

    sentinel();
    auto refused = (*engine)->restore(
        1, rank == 0 ? std::vector<std::string>{"a"} : std::vector<std::string>{"no such"});
    ASSERT_FALSE(refused) << "rank " << rank;
    EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
    EXPECT_NE(refused.error().message().find(rank == 0 ? "another rank" : "'no such'"), std::string::npos)
        << refused.error().message();
    EXPECT_TRUE(untouched(state.a) && untouched(state.b) && untouched(state.c)) << "rank " << rank;
    ASSERT_EQ((*engine)->restore(1, {}).value_or(0), 1u);
    EXPECT_TRUE(state.matches(seed(1, rank)));
  });
}

// Rank 1 cannot write its shard (its data file's name is taken by a directory): nothing is committed, both
// ranks get an error (rank 1 its own cause, rank 0 the failed rank's number), and the next one commits.
TEST(CkptGroup, OneRankFailingFailsTheCheckpointEverywhere) {
  TempDir dir;
  ::rdmakit::testing::expect_warning("failed");
  run_ranks(2, [&](coll::Communicator& comm) {
    PatternState state;
    auto engine = Engine::create(group_options(dir.path(), comm), state.buffers());
    ASSERT_TRUE(engine);
    ASSERT_TRUE(comm.barrier());  // both engines created (rank 0 cleaned the directory) before the trap
    if (comm.rank() == 1)
      fs::create_directories(dir.path() + "/" + detail::temporary_name(7, "group") + "/" +
                             detail::data_file_name(1));
    ASSERT_TRUE(comm.barrier());
    state.fill(seed(7, comm.rank()));
    ASSERT_TRUE((*engine)->snapshot(7));
    auto failed = (*engine)->wait_persisted();
    ASSERT_FALSE(failed) << "rank " << comm.rank();
    if (comm.rank() == 0)
      EXPECT_NE(failed.error().message().find("rank(s) 1 failed"), std::string::npos)
          << failed.error().message();
    else
      EXPECT_NE(failed.error().message().find("rank-00001.data"), std::string::npos)
          << failed.error().message();
    EXPECT_FALSE(fs::exists(dir.path() + "/" + detail::checkpoint_name(7)));
    state.fill(seed(8, comm.rank()));
    ASSERT_TRUE((*engine)->snapshot(8));
    auto report = (*engine)->wait_persisted();
    ASSERT_TRUE(report) << report.error().describe();
    state.fill(0);
    ASSERT_EQ((*engine)->restore_latest().value_or(0), 8u);
    EXPECT_TRUE(state.matches(seed(8, comm.rank())));
  });
}

// Every shard was reported durable and rank 0 committed, but rank 2 cannot learn that (its communicator
// fails before the broadcast, as when another rank dies then): an unknown outcome, not a failure; the next
// call settles it from the commit record, so every rank reports the commit (rank 2 used to report
// "failed in the background: ranks could not learn the commit's outcome").
TEST(CkptGroup, UnknownOutcomeIsSettledFromTheCommitRecord) {
  TempDir dir;
  ::rdmakit::testing::expect_warning("unknown");
  ::rdmakit::testing::expect_warning("could not be told");
  ::rdmakit::testing::expect_warning("cannot learn the outcome");
  run_ranks(3, [&](coll::Communicator& comm) {
    PatternState state;
    auto options = group_options(dir.path(), comm);
    if (comm.rank() == 2) options.crash_point = static_cast<int>(detail::CrashPoint::AbortAfterReport);
    auto engine = Engine::create(options, state.buffers());
    ASSERT_TRUE(engine);
    state.fill(seed(7, comm.rank()));
    ASSERT_TRUE((*engine)->snapshot(7));
    auto report = (*engine)->wait_persisted();
    ASSERT_TRUE(report) << "rank " << comm.rank() << ": " << report.error().describe();
    EXPECT_EQ(report->step, 7u);
    EXPECT_EQ(report->path, dir.path() + "/" + detail::checkpoint_name(7));
  });
  EXPECT_TRUE(verify_checkpoint(dir.path() + "/" + detail::checkpoint_name(7)));
}

}  // namespace
}  // namespace rdmakit::ckpt
