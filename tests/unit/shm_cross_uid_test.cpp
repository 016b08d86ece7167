// An shm context serves only its own uid unless told otherwise: a process of another uid (started here
// through setpriv as nobody) is refused before anything about the context is sent, on abstract and file
// system listeners alike, and a context refuses to connect to a listener of another uid. Needs root (to
// switch uid) and setpriv; skipped otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "support/test_support.hpp"

using namespace std::chrono_literals;
using namespace rdmakit;

namespace {

constexpr const char* kNobody = "65534";

// A child process running the peer as nobody; its stdout is read line by line. The peer itself allows
// uid 0 (us), so that what is tested is our side's refusal, not its own.
class NobodyPeer {
 public:
  NobodyPeer(const std::string& mode, const std::string& address, const char* peer_allows = "0") {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::setenv("RDMAKIT_SHM_ALLOWED_UIDS", peer_allows, 1);
      ::execl("/usr/bin/setpriv", "setpriv", "--reuid", kNobody, "--regid", kNobody, "--clear-groups",
              RDMAKIT_SHM_UID_PEER, mode.c_str(), address.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = ::fdopen(out[0], "r");
  }
  ~NobodyPeer() {
    if (out_) std::fclose(out_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  std::string line() {
    char text[1024];
    if (!std::fgets(text, sizeof(text), out_)) return "";
    std::string s(text);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

class ShmCrossUid : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "switching to uid 65534 needs root";
    if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) is not installed";
    // The peer binary must be reachable by nobody: every directory on its path searchable by others.
    for (std::filesystem::path p = RDMAKIT_SHM_UID_PEER; p != p.root_path(); p = p.parent_path()) {
      struct stat st {};
      ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
      ASSERT_TRUE(st.st_mode & S_IXOTH) << p << " is not searchable by uid 65534";
    }
    context_ = Context::open(Options{.transport = "shm"}).value();
  }
  std::shared_ptr<Context> context_;
};

// The listener side turns nobody away and keeps waiting (accept() times out, it does not fail for the
// peer it waits for); nobody learns why and nothing else.
void expect_refused(Context& context, const std::string& address, bool file_system) {
  auto listener = context.listen(address).value();
  if (!file_system) rdmakit::testing::expect_warning("uid 65534");
  NobodyPeer peer("connect", listener->address());
  auto accepted = listener->accept(1s);
  std::string said = peer.line();
  EXPECT_TRUE(said.starts_with("REFUSED")) << said;
  if (file_system)  // mode 0600: the kernel refuses before we even see the connection
    EXPECT_NE(said.find("Permission denied"), std::string::npos) << said;
  else
    EXPECT_NE(said.find("may not connect"), std::string::npos) << said;
  ASSERT_FALSE(accepted.has_value());
  EXPECT_EQ(accepted.error().code(), Errc::Timeout);
}

}  // namespace

TEST_F(ShmCrossUid, AbstractListenerRefusesAnotherUid) {
  expect_refused(*context_, "shm:rdmakit-cross-uid-" + std::to_string(::getpid()), false);
}

TEST_F(ShmCrossUid, FileSystemListenerRefusesAnotherUid) {
  std::string dir = "/tmp/rdmakit-cross-uid-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);  // open to all: the socket's own mode must keep nobody out
  expect_refused(*context_, "shm:" + dir + "/listener", true);
  struct stat st {};
  auto listener = context_->listen("shm:" + dir + "/second").value();
  ASSERT_EQ(::stat((dir + "/second").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  listener.reset();
  ::rmdir(dir.c_str());
}

TEST_F(ShmCrossUid, DefaultListenerIsInAPrivateDirectory) {
  auto listener = context_->listen().value();
  std::string path = listener->address().substr(4);
  ASSERT_TRUE(path.starts_with("/")) << path;
  struct stat st {};
  ASSERT_EQ(::lstat(std::filesystem::path(path).parent_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  NobodyPeer peer("connect", listener->address());
  EXPECT_TRUE(peer.line().starts_with("REFUSED"));
}

// Another uid created /tmp/rdmakit-<our uid> first (anyone can, in /tmp): it is refused, and without
// XDG_RUNTIME_DIR the listener goes to a private directory of ours that nobody could have made first,
// instead of failing. TMPDIR points the test at a directory of its own.
TEST_F(ShmCrossUid, ListenFallsBackWhenAnotherUidTookOurTmpDirectory) {
  std::string pattern = "/tmp/rdmakit-taken-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  ASSERT_EQ(::chmod(pattern.c_str(), 0755), 0);
  std::string taken = pattern + "/rdmakit-" + std::to_string(::geteuid());
  ASSERT_EQ(::mkdir(taken.c_str(), 0777), 0);
  ASSERT_EQ(::chown(taken.c_str(), 65534, 65534), 0);  // as the stranger would have made it
  const char* old_tmp = std::getenv("TMPDIR");
  const char* old_runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string saved_tmp = old_tmp ? old_tmp : "", saved_runtime = old_runtime ? old_runtime : "";
  ::setenv("TMPDIR", pattern.c_str(), 1);
  ::unsetenv("XDG_RUNTIME_DIR");
  rdmakit::testing::expect_warning("not a private directory");
  auto listener = context_->listen();
  auto client = Context::open(Options{.transport = "shm"});
  Result<std::shared_ptr<Connection>> connected = std::unexpected(Error(Errc::InvalidArgument, "not tried"));
  Result<std::shared_ptr<Connection>> accepted = connected;
  if (listener && client) {
    auto acceptor = std::async(std::launch::async, [&] { return (*listener)->accept(5s); });
    connected = (*client)->connect((*listener)->address());
    accepted = acceptor.get();
  }
  old_tmp ? ::setenv("TMPDIR", saved_tmp.c_str(), 1) : ::unsetenv("TMPDIR");
  if (old_runtime) ::setenv("XDG_RUNTIME_DIR", saved_runtime.c_str(), 1);
  ASSERT_TRUE(listener) << "listen() failed: " << listener.error().describe();
  std::string path = (*listener)->address().substr(4);
  std::string dir = std::filesystem::path(path).parent_path();
  EXPECT_TRUE(dir.starts_with(taken + "-")) << path;
  struct stat st {};
  ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_TRUE(connected) << connected.error().describe();
  EXPECT_TRUE(accepted) << accepted.error().describe();
  listener->reset();
  std::error_code ignored;
  std::filesystem::remove_all(pattern, ignored);
}

// A bare socket of nobody's gets a refusal of a few bytes and no descriptor: nothing of ours.
TEST_F(ShmCrossUid, NothingOfOursIsSentToARefusedPeer) {
  auto listener = context_->listen("shm:rdmakit-cross-uid-raw-" + std::to_string(::getpid())).value();
  rdmakit::testing::expect_warning("uid 65534");
  NobodyPeer peer("raw", listener->address());
  auto accepted = listener->accept(1s);
  std::string said = peer.line();
  EXPECT_FALSE(accepted.has_value());
  ASSERT_TRUE(said.starts_with("GOT")) << said;
  int bytes = -1, fds = -1;
  if (std::sscanf(said.c_str(), "GOT %d %d", &bytes, &fds) == 2) {
    EXPECT_LT(bytes, 200);
    EXPECT_EQ(fds, 0);
  }
}

// The other way round: we do not connect to a listener of another uid (and send it nothing).
TEST_F(ShmCrossUid, ConnectorRefusesAListenerOfAnotherUid) {
  NobodyPeer peer("listen", "shm:rdmakit-cross-uid-nobody-" + std::to_string(::getpid()), "");
  std::string ready = peer.line();
  ASSERT_TRUE(ready.starts_with("READY ")) << ready;
  auto connection = context_->connect(ready.substr(6));
  ASSERT_FALSE(connection.has_value());
  EXPECT_EQ(connection.error().code(), Errc::ConnectionRefused);
  EXPECT_NE(connection.error().message().find("uid 65534"), std::string::npos)
      << connection.error().message();
  std::string accepted = peer.line();
  EXPECT_TRUE(accepted.starts_with("ACCEPT-FAILED")) << accepted;
}

// With the allow-list, the same nobody is served.
TEST_F(ShmCrossUid, AllowListLetsAnotherUidIn) {
  auto allowing = Context::open(Options{.transport = "shm"}.set("shm_allowed_uids", "65534")).value();
  auto listener = allowing->listen().value();
  EXPECT_FALSE(listener->address().starts_with("shm:/")) << "an allowed uid could not enter our directory";
  NobodyPeer peer("connect", listener->address());
  auto accepted = listener->accept(5s);
  EXPECT_TRUE(accepted.has_value()) << accepted.error().describe();
  EXPECT_EQ(peer.line(), "CONNECTED");
}
