// The shm transport between processes: a WRITE lands while the target is stopped (SIGSTOP), so no
// target CPU was needed; a peer that dies fails pending operations at once and leaves no shared
// segment behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "support/test_support.hpp"

using namespace std::chrono_literals;
using namespace rdmakit;

namespace {

void write_line(int fd, const std::string& line) {
  std::string text = line + "\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

int count_shm_mappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find("rdmakit-shm") != std::string::npos) ++count;
  return count;
}

// A target process: a context with one allocate()'d region and one plain heap region, a listener, and
// one accepted connection. Tells the parent the address and descriptors, then waits for "check" and
// exits 0 when both regions hold the pattern the parent wrote.
struct Target {
  pid_t pid = -1;
  int to_parent = -1;
  int to_child = -1;
  std::string address;
  RemoteRegion mapped, heap;

  [[noreturn]] static void run(int out, int in) {
    auto ctx = Context::open(Options{.transport = "shm"});
    if (!ctx) _exit(10);
    auto mapped = (*ctx)->allocate(1 << 20, Access::All);
    static std::vector<std::byte> heap(1 << 20);
    auto registered = (*ctx)->register_memory(heap.data(), heap.size(), Access::All);
    auto listener = (*ctx)->listen();
    if (!mapped || !registered || !listener) _exit(11);
    write_line(out, (*listener)->address());
    write_line(out, (*mapped)->descriptor().to_hex());
    write_line(out, (*registered)->descriptor().to_hex());
    auto connection = (*listener)->accept(10s);
    if (!connection) _exit(12);
    write_line(out, "ready");
    if (read_line(in) != "check") _exit(13);
    bool ok = rdmakit::testing::find_pattern_mismatch((*mapped)->data(), 1 << 20, 5) == (1u << 20) &&
              rdmakit::testing::find_pattern_mismatch(heap.data(), 1 << 20, 6) == (1u << 20);
    _exit(ok ? 0 : 1);
  }

  static Target start() {
    int up[2], down[2];
    EXPECT_EQ(::pipe(up), 0);
    EXPECT_EQ(::pipe(down), 0);
    Target t;
    t.pid = ::fork();
    if (t.pid == 0) {
      ::close(up[0]);
      ::close(down[1]);
      run(up[1], down[0]);
    }
    ::close(up[1]);
    ::close(down[0]);
    t.to_parent = up[0];
    t.to_child = down[1];
    t.address = read_line(t.to_parent);
    t.mapped = RemoteRegion::from_hex(read_line(t.to_parent)).value();
    t.heap = RemoteRegion::from_hex(read_line(t.to_parent)).value();
    return t;
  }

  int wait_exit() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(to_parent);
    ::close(to_child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

TEST(ShmProcess, WriteLandsWhileTheTargetIsStopped) {
  Target target = Target::start();
  auto ctx = Context::open(Options{.transport = "shm"}).value();
  auto connection = ctx->connect(target.address).value();
  ASSERT_EQ(read_line(target.to_parent), "ready");

  ASSERT_EQ(::kill(target.pid, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(target.pid, &status, WUNTRACED), target.pid);
  ASSERT_TRUE(WIFSTOPPED(status));  // every thread of the target is stopped from here on

  auto local = ctx->allocate(1 << 20, Access::All).value();
  auto back = ctx->allocate(1 << 20, Access::All).value();
  for (auto [remote, seed] : {std::pair{target.mapped, 5u}, std::pair{target.heap, 6u}}) {
    rdmakit::testing::fill_pattern(local->data(), 1 << 20, seed);
    auto wrote = connection->wait(connection->write(local->whole().value(), remote.at(0)).value(), 5s);
    ASSERT_TRUE(wrote && wrote->ok());
    auto read = connection->wait(connection->read(back->whole().value(), remote.at(0)).value(), 5s);
    ASSERT_TRUE(read && read->ok());
    EXPECT_EQ(rdmakit::testing::find_pattern_mismatch(back->data(), 1 << 20, seed), 1u << 20);
  }
  // An atomic on the mapped region needs no target CPU either.
  auto word = ctx->allocate(8, Access::All).value();
  RemoteAddress last_word = target.mapped.at((1 << 20) - 8);
  auto added = connection->wait(connection->fetch_add(word->slice(0, 8), last_word, 0).value(), 5s);
  ASSERT_TRUE(added && added->ok());

  ASSERT_EQ(::kill(target.pid, SIGCONT), 0);
  write_line(target.to_child, "check");
  EXPECT_EQ(target.wait_exit(), 0) << "the target did not find the bytes written while it was stopped";
}

TEST(ShmProcess, DeadPeerFailsPendingOperationsAndLeavesNothingBehind) {
  int before = count_shm_mappings();
  {
    Target target = Target::start();
    auto ctx = Context::open(Options{.transport = "shm", .timeout = 60s, .rnr_timeout = 30s}).value();
    auto connection = ctx->connect(target.address).value();
    ASSERT_EQ(read_line(target.to_parent), "ready");
    auto local = ctx->allocate(4096, Access::All).value();
    auto recv = connection->post_recv(local->slice(0, 64)).value();
    auto send = connection->send(local->slice(0, 8)).value();  // the target posts no receive: it waits (RNR)
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(::kill(target.pid, SIGKILL), 0);
    auto start = std::chrono::steady_clock::now();
    auto failed = connection->wait(send, 10s);
    ASSERT_TRUE(failed);
    EXPECT_EQ(failed->status, Status::TransportRetryExceeded);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    EXPECT_EQ(connection->wait(recv, 5s)->status, Status::Flushed);
    auto late = connection->write(local->slice(0, 8), target.mapped.at(0));  // accepted, flushed
    ASSERT_TRUE(late.has_value()) << late.error().describe();
    EXPECT_EQ(connection->wait(*late, 5s)->status, Status::Flushed);
    EXPECT_EQ(target.wait_exit(), 128 + SIGKILL);
  }
  // The dead target's memfds went with its last descriptor and our last mapping; nothing in /dev/shm.
  EXPECT_EQ(count_shm_mappings(), before);
}

TEST(ShmProcess, CrossMemoryWriteToAVanishedProcessFails) {
  Target target = Target::start();
  auto ctx = Context::open(Options{.transport = "shm"}).value();
  auto connection = ctx->connect(target.address).value();
  ASSERT_EQ(read_line(target.to_parent), "ready");
  ::kill(target.pid, SIGKILL);
  EXPECT_EQ(target.wait_exit(), 128 + SIGKILL);
  auto local = ctx->allocate(64, Access::All).value();
  // Either the progress thread saw the hang-up first (the post is flushed) or the write finds no process.
  auto id = connection->write(local->slice(0, 8), target.heap.at(0));
  ASSERT_TRUE(id.has_value()) << id.error().describe();
  Status status = connection->wait(*id, 5s)->status;
  EXPECT_TRUE(status == Status::TransportRetryExceeded || status == Status::Flushed) << to_string(status);
  EXPECT_FALSE(connection->health().has_value());
}

}  // namespace
