// Incremental checkpoints: unchanged chunks are not written but referenced from the checkpoint that holds
// them; restore, verify and export follow the references; retention keeps a referenced checkpoint while any
// surviving one references it; a manifest's references are checked like every other field.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "ckpt/manifest.hpp"
#include "ckpt/persist.hpp"
#include "ckpt_support.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::PatternState;
using testing::TempDir;

EngineOptions incremental_options(const std::string& dir, std::uint32_t keep = 2) {
  auto options = testing::test_options(dir);
  options.incremental = true;
  options.keep = keep;
  return options;
}

std::string path_of(const std::string& dir, std::uint64_t step) {
  return dir + "/" + detail::checkpoint_name(step);
}

std::uint64_t allocated_bytes(const std::string& file) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : ~0ull;
}

PersistReport commit(Engine& engine, std::uint64_t step) {
  EXPECT_TRUE(engine.snapshot(step));
  auto report = engine.wait_persisted();
  EXPECT_TRUE(report) << report.error().describe();
  return report.value_or(PersistReport{});
}

TEST(CkptIncremental, UnchangedChunksReferencedAndRestored) {
  TempDir dir;
  PatternState state;
  auto engine = Engine::create(incremental_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(1);
  EXPECT_EQ(commit(**engine, 1).reused_bytes, 0u);
  state.c[5] ^= 0xff;  // only the last chunk (it holds buffer c) changes
  auto report = commit(**engine, 2);
  std::uint64_t last_chunk = state.bytes() % (128 << 10);
  EXPECT_EQ(report.reused_bytes, state.bytes() - last_chunk);
  auto data = path_of(dir.path(), 2) + "/" + detail::data_file_name(0);
  EXPECT_EQ(fs::file_size(data), state.bytes());
  EXPECT_LE(allocated_bytes(data), 2 * (128u << 10)) << "unchanged chunks were written";
  auto manifest = read_manifest(path_of(dir.path(), 2));
  ASSERT_TRUE(manifest);
  EXPECT_EQ(manifest->chunks.front().source_step, 1u);
  EXPECT_FALSE(manifest->chunks.back().source_step);
  EXPECT_TRUE(verify_checkpoint(path_of(dir.path(), 2)));

  auto expected_c = state.c;
  state.fill(9);
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 2u);
  EXPECT_EQ(state.c, expected_c);
  state.c[5] ^= 0xff;
  EXPECT_TRUE(state.matches(1));  // a and b: from step 1's file

  // export follows references too: tensor "a" of step 2 equals the state's.
  auto npy = dir.path() + "/a.npy";
  ASSERT_TRUE(export_npy(path_of(dir.path(), 2), "a", npy));
  std::ifstream in(npy, std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GE(bytes.size(), state.a.size());
  EXPECT_TRUE(std::equal(state.a.begin(), state.a.end(), bytes.end() - static_cast<long>(state.a.size())));
}

// The base of an incremental run is only deleted once no surviving checkpoint references it.
TEST(CkptIncremental, RetentionKeepsReferencedCheckpointsAlive) {
  TempDir dir;
  PatternState state;
  auto engine = Engine::create(incremental_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(1);
  commit(**engine, 1);
  for (std::uint64_t step = 2; step <= 5; ++step) {
    state.c[0] = static_cast<unsigned char>(step);
    commit(**engine, step);
  }
  auto steps = [&] {
    std::vector<std::uint64_t> out;
    auto list = list_checkpoints(dir.path());
    for (const auto& info : list.value_or(std::vector<CheckpointInfo>{})) out.push_back(info.step);
    return out;
  };
  EXPECT_EQ(steps(), (std::vector<std::uint64_t>{5, 4, 1})) << "step 1 holds what 4 and 5 reference";
  state.fill(60);  // everything changes: step 6 references nothing, step 7 references 6
  commit(**engine, 6);
  state.c[0] = 7;
  commit(**engine, 7);
  EXPECT_EQ(steps(), (std::vector<std::uint64_t>{7, 6}));
  // A fresh engine restores step 7 and continues incrementally from it.
  PatternState other;
  auto second = Engine::create(incremental_options(dir.path()), other.buffers());
  ASSERT_TRUE(second);
  ASSERT_EQ((*second)->restore_latest().value_or(0), 7u);
  EXPECT_EQ(other.c[0], 7);
  other.c[0] = 8;
  EXPECT_GT(commit(**second, 8).reused_bytes, 0u);
  ASSERT_EQ((*second)->restore_latest().value_or(0), 8u);
}

// A missing holder: the checkpoint that references it is skipped, with the holder named.
// One flipped byte in the base: verify of the checkpoint that references it names the base's data file,
// which holds the bad bytes (it named the referencing checkpoint's file, which holds a hole there).
TEST(CkptIncremental, DamagedBaseIsNamedWhereTheBytesAre) {
  TempDir dir;
  PatternState state;
  {
    auto engine = Engine::create(incremental_options(dir.path(), 3), state.buffers());
    ASSERT_TRUE(engine);
    state.fill(1);
    commit(**engine, 1);
    state.c[5] ^= 0xff;
    commit(**engine, 2);
  }
  {
    std::fstream file(path_of(dir.path(), 1) + "/" + detail::data_file_name(0),
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(200'000);  // chunk 1, which step 2 references
    file.put(static_cast<char>(state.a[200'000] ^ 0x01));
  }
  auto base = verify_checkpoint(path_of(dir.path(), 1));
  auto referencing = verify_checkpoint(path_of(dir.path(), 2));
  ASSERT_FALSE(base);
  ASSERT_FALSE(referencing);
  std::string held_by =
      path_of(dir.path(), 1) + ": checksum mismatch in " + detail::data_file_name(0) + " chunk 1 ";
  EXPECT_NE(base.error().message().find(held_by), std::string::npos) << base.error().message();
  EXPECT_NE(referencing.error().message().find(held_by), std::string::npos) << referencing.error().message();
  EXPECT_NE(referencing.error().message().find("referenced by " + path_of(dir.path(), 2)), std::string::npos)
      << referencing.error().message();
}

TEST(CkptIncremental, MissingHolderSkippedAndNamed) {
  TempDir dir;
  PatternState state;
  {
    auto engine = Engine::create(incremental_options(dir.path(), 3), state.buffers());
    ASSERT_TRUE(engine);
    state.fill(1);
    commit(**engine, 1);
    state.c[0] ^= 1;
    commit(**engine, 2);
  }
  fs::remove(path_of(dir.path(), 1) + "/" + detail::data_file_name(0));  // holder damaged by hand
  auto verified = verify_checkpoint(path_of(dir.path(), 2));
  ASSERT_FALSE(verified);
  EXPECT_NE(verified.error().message().find(detail::checkpoint_name(1)), std::string::npos)
      << verified.error().message();
  ::rdmakit::testing::expect_warning("skipping");
  auto engine = Engine::create(incremental_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  auto step = (*engine)->restore_latest();
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().code(), Errc::NotFound);
}

TEST(CkptIncremental, ReferencesCheckedInManifests) {
  Manifest m{.step = 5,
             .chunk_bytes = 4096,
             .files = {FileEntry{"rank-00000.data", 8192}},
             .chunks = {ChunkEntry{0, 0, 4096, 1, 3}, ChunkEntry{0, 4096, 4096, 2, std::nullopt}}};
  auto text = detail::encode_manifest(m);
  EXPECT_TRUE(text.starts_with("rdmakit-ckpt-manifest 2\n")) << text;
  auto decoded = detail::decode_manifest(text);
  ASSERT_TRUE(decoded) << decoded.error().describe();
  EXPECT_EQ(decoded->chunks[0].source_step, 3u);
  for (std::uint64_t bad : {5ull, 9ull}) {  // itself, or newer: refused
    m.chunks[0].source_step = bad;
    auto refused = detail::decode_manifest(detail::encode_manifest(m));
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message().find("not older"), std::string::npos) << refused.error().message();
  }
  // A version-1 manifest carries no references (written by hand, with a valid checksum line).
  m.chunks[0].source_step.reset();
  auto v1 = detail::encode_manifest(m);
  auto pos = v1.find("chunk 0 0 4096 0000000000000001");
  ASSERT_NE(pos, std::string::npos);
  v1.insert(pos + 32, " ref 3");
  v1.erase(v1.rfind("checksum "));
  v1 += "checksum " + std::string(16, '0') + "\n";
  EXPECT_FALSE(detail::decode_manifest(v1));

  Manifest previous = m, current = m;
  previous.step = 4;
  current.step = 5;
  previous.chunks[1].source_step = 2;
  EXPECT_EQ(detail::mark_unchanged(current, previous), 8192u);
  EXPECT_EQ(current.chunks[0].source_step, 4u);
  EXPECT_EQ(current.chunks[1].source_step, 2u);  // the holder, never a chain
  current = m;
  current.step = 5;
  current.chunk_bytes = 8192;  // other chunking: nothing reused
  previous.chunk_bytes = 4096;
  EXPECT_EQ(detail::mark_unchanged(current, previous), 0u);
}

TEST(CkptIncremental, RefusedWithACommunicator) {
  TempDir dir;
  PatternState state;
  testing::run_ranks(1, [&](coll::Communicator& comm) {
    auto options = incremental_options(dir.path());
    options.communicator = &comm;
    auto engine = Engine::create(options, state.buffers());
    ASSERT_FALSE(engine);
    EXPECT_EQ(engine.error().code(), Errc::NotSupported);
  });
}

}  // namespace
}  // namespace rdmakit::ckpt
