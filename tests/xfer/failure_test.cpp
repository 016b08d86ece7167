// A segment owner killed with SIGKILL in the middle of a batch fails only the requests that touch it,
// within the bound (peer_timeout, plus a re-resolve that finds the name gone); the other owner's requests
// all succeed with their bytes in place.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;

// An owner process (tests/xfer/xfer_peer.cpp) publishing one segment.
class PeerProcess {
 public:
  PeerProcess(const std::filesystem::path& dir, const std::string& segment, std::size_t size) {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to_child[0], 0);
      ::dup2(from_child[1], 1);
      ::close(to_child[1]);
      ::close(from_child[0]);
      auto bytes = std::to_string(size);
      ::execl(RDMAKIT_XFER_PEER, RDMAKIT_XFER_PEER, dir.c_str(), segment.c_str(), bytes.c_str(), "tcp",
              nullptr);
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    char line[16] = {};
    ready_ = ::read(from_child[0], line, 6) == 6 && std::strncmp(line, "ready\n", 6) == 0;
    ::close(from_child[0]);
  }
  ~PeerProcess() {
    if (stdin_ >= 0) ::close(stdin_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  bool ready() const { return ready_; }
  // SIGSTOP returns before every thread has stopped (one thread takes the signal and then stops the others),
  // so a stop waits for the group stop: until then the owner's progress thread can still answer a request.
  void signal(int sig) const {
    ::kill(pid_, sig);
    int status = 0;
    if (sig == SIGSTOP) ::waitpid(pid_, &status, WUNTRACED);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  bool ready_ = false;
};

TEST(XferFailure, KilledOwnerFailsOnlyItsRequestsWithinTheBound) {
  constexpr std::size_t kSize = 16 << 20;
  TempDir dir;
  PeerProcess victim(dir.path(), "victim", kSize), survivor(dir.path(), "survivor", kSize);
  ASSERT_TRUE(victim.ready() && survivor.ready());
  FileMetadataStore metadata(dir.path());
  EngineOptions options{.name = "client", .transports = {"tcp"}, .peer_timeout = 1000ms};
  auto engine = make_engine(metadata, options);
  ASSERT_TRUE(engine);
  auto local = make_buffer(kSize);
  std::memset(local.get(), 0x5a, kSize);
  ASSERT_TRUE(engine->register_local(local.get(), kSize).has_value());
  auto victim_kv = engine->open_segment("victim");
  auto survivor_kv = engine->open_segment("survivor");
  ASSERT_TRUE(victim_kv.has_value() && survivor_kv.has_value());

  // The victim is stopped first, so none of its requests can complete before it dies (tcp needs the
  // target's CPU); then it is killed while they are in flight.
  victim.signal(SIGSTOP);
  std::vector<Request> requests;
  for (std::uint64_t k = 0; k < 16; ++k) {
    requests.push_back(Request{Op::Write, local.get() + k * (1 << 20), *victim_kv, k * (1 << 20), 1 << 20});
    requests.push_back(Request{Op::Write, local.get() + k * (1 << 20), *survivor_kv, k * (1 << 20), 1 << 20});
  }
  auto batch = engine->submit(requests);
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  victim.signal(SIGKILL);
  auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE((*batch)->wait(10s).has_value());
  auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(took, options.peer_timeout + 2s) << "bound: peer_timeout + a re-resolve";
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto status = *(*batch)->status(i);
    if (requests[i].segment.value == victim_kv->value) {
      EXPECT_FALSE(status.has_value()) << "request " << i << " to the killed owner reported success";
    } else {
      EXPECT_TRUE(status.has_value()) << "request " << i << ": " << status.error().describe();
    }
  }
  EXPECT_EQ((*batch)->failed(), 16u);

  // The survivor's bytes landed: read them back.
  auto back = make_buffer(kSize);
  std::memset(back.get(), 0, kSize);
  ASSERT_TRUE(engine->register_local(back.get(), kSize).has_value());
  auto read = engine->submit(std::vector{Request{Op::Read, back.get(), *survivor_kv, 0, kSize}});
  ASSERT_TRUE(read.has_value() && (*read)->wait(10s).has_value());
  ASSERT_TRUE((*(*read)->status(0)).has_value());
  EXPECT_EQ(std::memcmp(back.get(), local.get(), kSize), 0);
}

}  // namespace
}  // namespace rdmakit::xfer::testing
