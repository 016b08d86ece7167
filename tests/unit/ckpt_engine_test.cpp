// The checkpoint engine end to end on a real directory: snapshot, persist, commit, retention, restore,
// corruption and torn checkpoints skipped, background errors surfacing at the next call.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "ckpt/io.hpp"
#include "ckpt/options.hpp"
#include "ckpt/persist.hpp"
#include "ckpt_support.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/ckpt/store.hpp"
#include "support/test_support.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;

using ckpt::testing::TempDir;  // on the build's file system (ext4 here: O_DIRECT works)

// Application state: three buffers of odd sizes, so chunks and buffers do not line up.
struct State {
  std::vector<float> weights = std::vector<float>(300'000);
  std::vector<std::uint8_t> bytes = std::vector<std::uint8_t>(12'345);
  std::vector<double> moments = std::vector<double>(70'001);

  void fill(std::uint32_t seed) {
    ckpt::testing::fill_seeded(weights.data(), weights.size() * 4, seed);
    ckpt::testing::fill_seeded(bytes.data(), bytes.size(), seed + 1);
    ckpt::testing::fill_seeded(moments.data(), moments.size() * 8, seed + 2);
  }
  bool matches(std::uint32_t seed) const {
    return ckpt::testing::seeded_mismatch(weights.data(), weights.size() * 4, seed) == weights.size() * 4 &&
           ckpt::testing::seeded_mismatch(bytes.data(), bytes.size(), seed + 1) == bytes.size() &&
           ckpt::testing::seeded_mismatch(moments.data(), moments.size() * 8, seed + 2) == moments.size() * 8;
  }
  std::vector<Buffer> buffers() {
    return {{"layer0.weight", weights.data(), weights.size() * 4, DType::F32, {600, 500}},
            {"step bytes", bytes.data(), bytes.size(), DType::U8, {}},
            {"adam/m", moments.data(), moments.size() * 8, DType::F64, {70'001}}};
  }
};

EngineOptions small_options(const std::string& dir) {
  return EngineOptions{
      .directory = dir, .keep = 2, .chunk_bytes = 64 << 10, .io_depth = 4, .copy_threads = 2};
}

TEST(CkptEngine, SnapshotPersistRestoreBitExact) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine) << engine.error().describe();
  EXPECT_EQ((*engine)->staging_bytes(), (((*engine)->state_bytes() + 4095) / 4096) * 4096);
  state.fill(7);
  ASSERT_TRUE((*engine)->snapshot(10));
  state.fill(99);  // training goes on: the snapshot already holds its own copy
  auto report = (*engine)->wait_persisted();
  ASSERT_TRUE(report) << report.error().describe();
  EXPECT_EQ(report->step, 10u);
  EXPECT_TRUE(report->direct_io);
  EXPECT_EQ(report->bytes, (*engine)->state_bytes());
  EXPECT_TRUE(fs::exists(dir.path() + "/" + detail::checkpoint_name(10) + "/MANIFEST"));

  auto step = (*engine)->restore_latest();
  ASSERT_TRUE(step) << step.error().describe();
  EXPECT_EQ(*step, 10u);
  EXPECT_TRUE(state.matches(7));
}

TEST(CkptEngine, KeepsLastKAndRestoresNewest) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  for (std::uint32_t step = 1; step <= 5; ++step) {
    state.fill(step);
    ASSERT_TRUE((*engine)->snapshot(step));
  }
  auto report = (*engine)->wait_persisted();
  ASSERT_TRUE(report) << report.error().describe();
  auto list = list_checkpoints(dir.path());
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].step, 5u);
  EXPECT_EQ((*list)[1].step, 4u);
  for (const auto& entry : fs::directory_iterator(dir.path()))  // no temporary or half-deleted leftovers
    EXPECT_TRUE(entry.path().filename().string().starts_with("ckpt-")) << entry.path();
  state.fill(1000);
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 5u);
  EXPECT_TRUE(state.matches(5));
}

// Flips one byte of the newest checkpoint's data file: verify names the chunk, restore falls back.
// Anonymous memory resident in this process, in KiB (RssAnon of /proc/self/status).
std::uint64_t resident_anon_kib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  std::uint64_t value = 0;
  while (in >> key) {
    if (key == "RssAnon:") return in >> value ? value : 0;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

// Staging is faulted in at create, not by the first snapshot (which stalled 4-7x the steady state): every
// page of a populated buffer is resident (mincore), and creating an engine makes its staging resident.
TEST(CkptEngine, StagingIsResidentAfterCreate) {
  constexpr std::size_t kBytes = 16 << 20;
  auto buffer = detail::AlignedBuffer::allocate(kBytes, true);
  ASSERT_TRUE(buffer);
  std::vector<unsigned char> pages(kBytes / 4096);
  ASSERT_EQ(::mincore(buffer->data(), kBytes, pages.data()), 0);
  EXPECT_EQ(std::count_if(pages.begin(), pages.end(), [](unsigned char p) { return p & 1; }),
            static_cast<long>(pages.size()));

  TempDir dir;
  std::vector<unsigned char> state(32 << 20, 7);  // touched: resident before the engine exists
  auto before = resident_anon_kib();
  auto engine =
      Engine::create(small_options(dir.path()), {{"state", state.data(), state.size(), DType::U8, {}}});
  ASSERT_TRUE(engine) << engine.error().describe();
  auto grown = resident_anon_kib() - before;
  EXPECT_GE(grown * 1024, (*engine)->staging_bytes() * 9 / 10)
      << "only " << grown << " KiB became resident for " << (*engine)->staging_bytes() << " bytes of staging";
}

// restore(step) loads that step, not the newest; a step that is not there is NotFound, buffers untouched.
TEST(CkptEngine, RestoreAChosenStep) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  for (std::uint32_t step = 1; step <= 2; ++step) {
    state.fill(step);
    ASSERT_TRUE((*engine)->snapshot(step));
    ASSERT_TRUE((*engine)->wait_persisted());
  }
  state.fill(50);
  auto older = (*engine)->restore(1);
  ASSERT_TRUE(older) << older.error().describe();
  EXPECT_EQ(*older, 1u);
  EXPECT_TRUE(state.matches(1));
  state.fill(51);
  auto missing = (*engine)->restore(7);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Errc::NotFound);
  EXPECT_TRUE(state.matches(51));
  ASSERT_EQ((*engine)->restore(2).value_or(0), 2u);
  EXPECT_TRUE(state.matches(2));
}

// Every byte of `data` still holds `value`.
bool all_bytes(const void* data, std::size_t size, unsigned char value) {
  const auto* p = static_cast<const unsigned char*>(data);
  return std::all_of(p, p + size, [&](unsigned char b) { return b == value; });
}

// Subset restore: only the named buffers are written, in place as the chunks verify; the others keep every
// byte of their sentinel, also where they share a chunk with a loaded one ("step bytes" sits inside the
// 64 KiB chunks of its neighbours). An unknown name is refused naming it, before anything is written.
TEST(CkptEngine, SubsetRestoreWritesOnlyTheNamedBuffers) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(3);
  ASSERT_TRUE((*engine)->snapshot(3));
  ASSERT_TRUE((*engine)->wait_persisted());
  auto sentinel = [&] {
    std::memset(state.weights.data(), 0xA5, state.weights.size() * 4);
    std::memset(state.bytes.data(), 0xA5, state.bytes.size());
    std::memset(state.moments.data(), 0xA5, state.moments.size() * 8);
  };

  sentinel();
  auto outer = (*engine)->restore(3, {"layer0.weight", "adam/m"});
  ASSERT_TRUE(outer) << outer.error().describe();
  EXPECT_EQ(*outer, 3u);
  EXPECT_EQ(ckpt::testing::seeded_mismatch(state.weights.data(), state.weights.size() * 4, 3),
            state.weights.size() * 4);
  EXPECT_EQ(ckpt::testing::seeded_mismatch(state.moments.data(), state.moments.size() * 8, 5),
            state.moments.size() * 8);
  EXPECT_TRUE(all_bytes(state.bytes.data(), state.bytes.size(), 0xA5)) << "a buffer not named was written";

  sentinel();
  ASSERT_EQ((*engine)->restore_latest({"step bytes"}).value_or(0), 3u);
  EXPECT_EQ(ckpt::testing::seeded_mismatch(state.bytes.data(), state.bytes.size(), 4), state.bytes.size());
  EXPECT_TRUE(all_bytes(state.weights.data(), state.weights.size() * 4, 0xA5));
  EXPECT_TRUE(all_bytes(state.moments.data(), state.moments.size() * 8, 0xA5));

  sentinel();
  for (auto restored : {(*engine)->restore_latest({"adam/m", "adam/v"}), (*engine)->restore(3, {"adam/v"})}) {
    ASSERT_FALSE(restored);
    EXPECT_EQ(restored.error().code(), Errc::InvalidArgument);
    EXPECT_NE(restored.error().message().find("'adam/v'"), std::string::npos) << restored.error().message();
  }
  EXPECT_TRUE(all_bytes(state.moments.data(), state.moments.size() * 8, 0xA5)) << "refused, yet written";
  auto missing = (*engine)->restore(9, {"adam/m"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Errc::NotFound);
  ASSERT_EQ((*engine)->restore_latest({}).value_or(0), 3u);  // an empty list: every buffer
  EXPECT_TRUE(state.matches(3));
}

// on_persisted: one call per snapshot, with its step and report, before the next snapshot can start.
TEST(CkptEngine, PerCommitCompletion) {
  TempDir dir;
  State state;
  std::vector<std::pair<std::uint64_t, std::string>> seen;  // step, committed path ("" on failure)
  auto options = small_options(dir.path());
  options.on_persisted = [&](std::uint64_t step, const Result<PersistReport>& outcome) {
    seen.emplace_back(step, outcome ? outcome->path : std::string());
  };
  auto engine = Engine::create(options, state.buffers());
  ASSERT_TRUE(engine);
  for (std::uint32_t step = 1; step <= 3; ++step) {
    state.fill(step);
    ASSERT_TRUE((*engine)->snapshot(step));
  }
  ASSERT_TRUE((*engine)->wait_persisted());
  ASSERT_EQ(seen.size(), 3u);
  for (std::uint64_t step = 1; step <= 3; ++step) {
    EXPECT_EQ(seen[step - 1].first, step);
    EXPECT_EQ(seen[step - 1].second, dir.path() + "/" + detail::checkpoint_name(step));
  }
}

TEST(CkptEngine, CorruptByteDetectedNamedAndSkipped) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(1);
  ASSERT_TRUE((*engine)->snapshot(1));
  ASSERT_TRUE((*engine)->wait_persisted());
  state.fill(2);
  ASSERT_TRUE((*engine)->snapshot(2));
  ASSERT_TRUE((*engine)->wait_persisted());

  std::string newest = dir.path() + "/" + detail::checkpoint_name(2);
  std::uint64_t at = 3 * (64 << 10) + 100;  // inside chunk 3
  {
    std::fstream file(newest + "/rank-00000.data", std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(at));
    char c = static_cast<char>(file.get());
    file.seekp(static_cast<std::streamoff>(at));
    file.put(static_cast<char>(c ^ 0x10));
  }
  auto verified = verify_checkpoint(newest);
  ASSERT_FALSE(verified);
  EXPECT_NE(verified.error().message().find("rank-00000.data chunk 3 "), std::string::npos)
      << verified.error().message();
  EXPECT_NE(verified.error().message().find("layer0.weight"), std::string::npos);

  rdmakit::testing::expect_warning("checksum mismatch");
  state.fill(50);
  auto step = (*engine)->restore_latest();
  ASSERT_TRUE(step);
  EXPECT_EQ(*step, 1u);
  EXPECT_TRUE(state.matches(1));
}

TEST(CkptEngine, TruncatedDataFileAndTornManifestSkipped) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  for (std::uint32_t step = 1; step <= 2; ++step) {
    state.fill(step);
    ASSERT_TRUE((*engine)->snapshot(step));
    ASSERT_TRUE((*engine)->wait_persisted());
  }
  fs::resize_file(dir.path() + "/" + detail::checkpoint_name(2) + "/rank-00000.data", 100'000);
  rdmakit::testing::expect_warning("truncated");
  state.fill(9);
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 1u);
  EXPECT_TRUE(state.matches(1));

  // A manifest cut short: detected by its checksum line, nothing restorable is left.
  auto manifest = dir.path() + "/" + detail::checkpoint_name(1) + "/MANIFEST";
  fs::resize_file(manifest, fs::file_size(manifest) - 10);
  rdmakit::testing::expect_warning("manifest");
  auto step = (*engine)->restore_latest();
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().code(), Errc::NotFound);
  EXPECT_TRUE(state.matches(1));  // untouched
}

// Restore loads host buffers chunk by chunk as each verifies: when the only checkpoint turns out damaged
// after some chunks were loaded, the error must say the buffers changed (not NotFound, a fresh start).
TEST(CkptEngine, DamagedOnlyCheckpointPartlyLoadedIsNotAFreshStart) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(1);
  ASSERT_TRUE((*engine)->snapshot(1));
  ASSERT_TRUE((*engine)->wait_persisted());
  auto data = dir.path() + "/" + detail::checkpoint_name(1) + "/rank-00000.data";
  std::uint64_t at = fs::file_size(data) - 10;  // in the last chunk: the earlier ones load first
  {
    std::fstream file(data, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(at));
    file.put('\x5a');
    file.seekp(static_cast<std::streamoff>(at + 1));
    file.put('\xa5');
  }
  rdmakit::testing::expect_warning("checksum mismatch");
  state.fill(3);
  auto step = (*engine)->restore_latest();
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().code(), Errc::ProtocolError) << step.error().describe();
  EXPECT_NE(step.error().message().find("overwrote part of the buffers"), std::string::npos)
      << step.error().message();
  EXPECT_FALSE(state.matches(3));  // what the error says did happen
}

TEST(CkptEngine, OtherWorldSizeRefusedClearly) {
  TempDir dir;
  State state;
  auto options = small_options(dir.path());
  options.world_size = 2;
  {
    auto engine = Engine::create(options, state.buffers());
    ASSERT_TRUE(engine);
    ASSERT_TRUE((*engine)->snapshot(3));
    ASSERT_TRUE((*engine)->wait_persisted());
  }
  options.world_size = 4;
  auto engine = Engine::create(options, state.buffers());
  ASSERT_TRUE(engine);
  auto step = (*engine)->restore_latest();
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().code(), Errc::InvalidArgument);
  EXPECT_NE(step.error().message().find("2 ranks"), std::string::npos) << step.error().message();
}

// A background failure surfaces, with its cause, at the next call, once; the engine keeps working after.
TEST(CkptEngine, BackgroundErrorSurfacesAtNextCall) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path() + "/sub"), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(1);
  ASSERT_TRUE((*engine)->snapshot(1));
  ASSERT_TRUE((*engine)->wait_persisted());
  // Make the directory unwritable by replacing it with a file for one snapshot.
  fs::rename(dir.path() + "/sub", dir.path() + "/moved");
  { std::ofstream(dir.path() + "/sub") << "not a directory"; }
  rdmakit::testing::expect_warning("failed");
  ASSERT_TRUE((*engine)->snapshot(2));
  auto next = (*engine)->snapshot(3);
  ASSERT_FALSE(next);
  EXPECT_NE(next.error().message().find("step 2"), std::string::npos) << next.error().message();
  EXPECT_NE(next.error().message().find("Not a directory"), std::string::npos) << next.error().message();
  fs::remove(dir.path() + "/sub");
  fs::rename(dir.path() + "/moved", dir.path() + "/sub");
  state.fill(4);
  ASSERT_TRUE((*engine)->snapshot(4));
  auto report = (*engine)->wait_persisted();
  ASSERT_TRUE(report) << report.error().describe();
  EXPECT_EQ(report->step, 4u);
}

TEST(CkptEngine, BadBuffersAndOptionsRefused) {
  TempDir dir;
  std::vector<float> a(10);
  auto dup = Engine::create(small_options(dir.path()),
                            {{"a", a.data(), 40, DType::F32, {}}, {"a", a.data(), 40, DType::F32, {}}});
  EXPECT_FALSE(dup);
  auto shape = Engine::create(small_options(dir.path()), {{"a", a.data(), 40, DType::F32, {3, 3}}});
  ASSERT_FALSE(shape);
  EXPECT_NE(shape.error().message().find("shape"), std::string::npos);
  auto options = small_options(dir.path());
  options.chunk_bytes = 1000;
  EXPECT_FALSE(Engine::create(options, {{"a", a.data(), 40, DType::F32, {}}}));
  options = small_options(dir.path());
  options.keep = 0;
  EXPECT_FALSE(Engine::create(options, {{"a", a.data(), 40, DType::F32, {}}}));
}

// The tunables are options: set in code > RDMAKIT_CKPT_<NAME> > default, a bad value names its variable.
TEST(CkptOptions, CodeBeatsEnvironmentBeatsDefault) {
  auto defaults = detail::resolve_engine_options({.directory = "d"});
  ASSERT_TRUE(defaults) << defaults.error().describe();
  EXPECT_EQ(defaults->keep, 3u);
  EXPECT_EQ(defaults->chunk_bytes, std::size_t{4} << 20);
  EXPECT_EQ(defaults->io_depth, 4u);
  EXPECT_TRUE(defaults->direct_io.value_or(false));
  ASSERT_TRUE(defaults->copy_threads.has_value());
  EXPECT_GE(*defaults->copy_threads, 1u);
  setenv("RDMAKIT_CKPT_KEEP", "5", 1);
  setenv("RDMAKIT_CKPT_DIRECT_IO", "no", 1);
  auto from_env = detail::resolve_engine_options({.directory = "d"});
  auto from_code = detail::resolve_engine_options({.directory = "d", .keep = 2});
  setenv("RDMAKIT_CKPT_CHUNK_BYTES", "1000", 1);
  auto bad = detail::resolve_engine_options({.directory = "d"});
  for (const char* env : {"RDMAKIT_CKPT_KEEP", "RDMAKIT_CKPT_DIRECT_IO", "RDMAKIT_CKPT_CHUNK_BYTES"})
    unsetenv(env);
  ASSERT_TRUE(from_env) << from_env.error().describe();
  EXPECT_EQ(from_env->keep, 5u);
  EXPECT_EQ(from_env->direct_io, false);
  ASSERT_TRUE(from_code) << from_code.error().describe();
  EXPECT_EQ(from_code->keep, 2u);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("RDMAKIT_CKPT_CHUNK_BYTES"), std::string::npos)
      << bad.error().message();
}

// export_npy writes numpy's format 1.0: magic, version, header length, a dict padded to 64 bytes, data.
TEST(CkptStore, ExportNpyHeaderAndData) {
  TempDir dir;
  State state;
  auto engine = Engine::create(small_options(dir.path()), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(4);
  ASSERT_TRUE((*engine)->snapshot(4));
  auto report = (*engine)->wait_persisted();
  ASSERT_TRUE(report);
  std::string out = dir.path() + "/w.npy";
  ASSERT_TRUE(export_npy(report->path, "layer0.weight", out));
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  std::size_t header = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header) % 64, 0u);
  auto dict = bytes.substr(10, header);
  EXPECT_NE(dict.find("'descr': '<f4'"), std::string::npos) << dict;
  EXPECT_NE(dict.find("'shape': (600, 500)"), std::string::npos) << dict;
  ASSERT_EQ(bytes.size(), 10 + header + state.weights.size() * 4);
  EXPECT_EQ(std::memcmp(bytes.data() + 10 + header, state.weights.data(), state.weights.size() * 4), 0);
  EXPECT_EQ(export_npy(report->path, "nope", out).error().code(), Errc::NotFound);
}

}  // namespace
}  // namespace rdmakit::ckpt
