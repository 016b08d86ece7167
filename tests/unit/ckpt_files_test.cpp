// What the checkpoint engine leaves on disk and what the tool prints: directories 0700 and files 0600 unless
// shared_group asks for the group; names with control bytes are escaped by describe_manifest (`rdmakit-ckpt
// show`); export of a tensor larger than the memory the process may have is not an abort.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ckpt_support.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

unsigned mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// Every directory and file the engine made under `root` (root included), with its mode.
void expect_modes(const std::string& root, unsigned directory, unsigned file) {
  EXPECT_EQ(mode_of(root), directory) << root;
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    EXPECT_EQ(mode_of(e.path()), e.is_directory() ? directory : file) << e.path();
    files += e.is_regular_file();
  }
  EXPECT_GE(files, 2u);  // a data file and a manifest at least
}

void snapshot_once(EngineOptions options) {
  testing::PatternState state;
  auto engine = Engine::create(options, state.buffers());
  ASSERT_TRUE(engine) << engine.error().describe();
  state.fill(1);
  ASSERT_TRUE((*engine)->snapshot(1));
  ASSERT_TRUE((*engine)->wait_persisted());
}

TEST(CkptFiles, CheckpointsArePrivateUnlessTheGroupIsAskedFor) {
  TempDir dir;
  auto old = ::umask(022);
  snapshot_once(testing::test_options(dir.path() + "/private/nested"));
  expect_modes(dir.path() + "/private", 0700, 0600);
  auto shared = testing::test_options(dir.path() + "/shared");
  shared.shared_group = true;
  snapshot_once(shared);
  expect_modes(dir.path() + "/shared", 0750, 0640);
  ::umask(old);
}

TEST(CkptFiles, ShowEscapesControlBytesInNames) {
  Manifest m{.step = 1, .chunk_bytes = 4096, .files = {FileEntry{"rank-00000.data", 8}}};
  m.tensors.push_back(TensorEntry{"w\x1b[2J\nfile forged 1 bytes\\", DType::U8, {8}, 0, 0, 8});
  auto text = describe_manifest(m);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find("\nfile forged"), std::string::npos) << text;
  EXPECT_NE(text.find("w\\x1b[2J\\x0afile forged 1 bytes\\x5c"), std::string::npos) << text;
}

// A child limited to its present address space plus less than the tensor: the export streams through a
// bounded buffer and succeeds (it was a std::bad_alloc and an abort).
TEST(CkptFiles, ExportOfATensorLargerThanTheMemoryLimitDoesNotAbort) {
  if (kAddressSanitizer) GTEST_SKIP() << "the sanitizer reserves more address space than any limit here";
  TempDir dir;
  constexpr std::size_t kBytes = 40u << 20;
  std::vector<unsigned char> big(kBytes, 7);
  {
    auto options = testing::test_options(dir.path());
    options.chunk_bytes = 1u << 20;
    auto engine = Engine::create(options, {{"big", big.data(), big.size(), DType::U8, {}}});
    ASSERT_TRUE(engine);
    ASSERT_TRUE((*engine)->snapshot(1));
    ASSERT_TRUE((*engine)->wait_persisted());
  }
  big = {};
  std::string checkpoint = list_checkpoints(dir.path()).value().front().path;
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0;
    statm >> pages;
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max =
        pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + (24u << 20);
    ::setrlimit(RLIMIT_AS, &limit);
    // The limit is below the tensor: a whole-tensor buffer (what export did) cannot be had.
    void* whole = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (whole != MAP_FAILED) ::_exit(4);
    auto ok = export_npy(checkpoint, "big", dir.path() + "/big.npy");
    ::_exit(ok ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the export died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(fs::file_size(dir.path() + "/big.npy"), kBytes + 128);
  EXPECT_EQ(mode_of(dir.path() + "/big.npy"), 0600u);
}

}  // namespace
}  // namespace rdmakit::ckpt
