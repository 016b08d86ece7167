// Ranks as processes (fork), meeting through the TCP rendezvous store: a correct run, and a rank killed
// mid-collective, after which every other rank fails with an error and none hangs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "coll_harness.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::uint16_t free_port() {
  auto server = bootstrap::TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
  return server ? (*server)->bound_port() : 0;
}

std::unique_ptr<Communicator> join(int rank, int n, std::uint16_t port, const std::string& local) {
  auto store = bootstrap::TcpStore::open({.host = "127.0.0.1", .port = port, .is_server = rank == 0,
                                          .timeout = std::chrono::milliseconds(20000)});
  if (!store) return nullptr;
  auto comm = Communicator::create(*store, rank, n,
                                   CommOptions{.network_transport = "tcp", .local_transport = local,
                                               .timeout = std::chrono::milliseconds(10000),
                                               .bootstrap_timeout = std::chrono::milliseconds(20000)});
  return comm ? std::move(*comm) : nullptr;
}

// Waits for every child; kills and reports the ones still running at the deadline.
std::vector<int> reap(const std::vector<pid_t>& pids, std::chrono::seconds limit) {
  std::vector<int> codes(pids.size(), -1);
  auto deadline = Clock::now() + limit;
  std::size_t left = pids.size();
  while (left > 0 && Clock::now() < deadline) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (codes[i] != -1) continue;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::size_t i = 0; i < pids.size(); ++i)
    if (codes[i] == -1) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      codes[i] = 999;  // hung
    }
  return codes;
}

class CollProcess : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "shm")
      if (auto probe = Context::open(Options{.transport = "shm"}); !probe)
        GTEST_SKIP() << "shm transport unavailable: " << probe.error().describe();
  }
};

TEST_P(CollProcess, ThreeProcessesAllreduceAndAllgather) {
  std::uint16_t port = free_port();
  ASSERT_NE(port, 0);
  constexpr int n = 3;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      auto comm = join(r, n, port, GetParam());
      if (!comm) _exit(2);
      std::size_t count = 100003;
      auto data = fill(DataType::F64, ReduceOp::Sum, r, count);
      if (!comm->allreduce(data.data(), data.data(), count, DataType::F64, ReduceOp::Sum)) _exit(3);
      for (std::size_t i = 0; i < count; ++i)
        if (decode(DataType::F64, data.data() + i * 8) != expected(DataType::F64, ReduceOp::Sum, n, i)) _exit(4);
      std::vector<int> all(n);
      int mine = r * 10;
      if (!comm->allgather(&mine, all.data(), 1, DataType::I32) || all != std::vector<int>{0, 10, 20}) _exit(5);
      comm.reset();
      _exit(0);
    }
    pids.push_back(pid);
  }
  auto codes = reap(pids, std::chrono::seconds(60));
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST_P(CollProcess, ARankKilledMidCollectiveFailsTheOthersAndNoneHangs) {
  std::uint16_t port = free_port();
  ASSERT_NE(port, 0);
  constexpr int n = 4, kVictim = 2;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      auto comm = join(r, n, port, GetParam());
      if (!comm) _exit(2);
      std::vector<float> data(1 << 20, 1.0f);
      for (int iteration = 0; iteration < 100000; ++iteration) {
        if (iteration == 3 && r == kVictim) [[maybe_unused]] auto w = write(ready[1], "x", 1);
        auto ok = comm->allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Avg);
        if (!ok) _exit(ok.error().message().empty() ? 6 : 0);  // the failure we wanted, with a message
      }
      _exit(1);  // never noticed the dead rank
    }
    pids.push_back(pid);
  }
  close(ready[1]);
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pids[kVictim], SIGKILL);
  auto codes = reap(pids, std::chrono::seconds(60));
  for (int r = 0; r < n; ++r) {
    if (r == kVictim) continue;
    EXPECT_EQ(codes[r], 0) << "rank " << r << (codes[r] == 999 ? " hung" : " did not fail cleanly");
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CollProcess, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdmakit::coll::testing
