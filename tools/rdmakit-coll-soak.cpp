// rdmakit-coll-soak: long-running collectives (issue 15 item 4). Forks R ranks (processes) on this host that
// meet through the TCP rendezvous store and run N allreduces of mixed sizes and types, every element of every
// result checked; each rank prints its open fds, threads and RSS at start, after a warm-up and at the end,
// and fails if fds or threads grew after the warm-up or RSS grew by more than 32 MiB.
//   rdmakit-coll-soak [-n N] [--ranks R] [--transport shm|tcp] [--seed S] [--timeout-ms T] [--kill]
// --kill: once every rank runs, one rank chosen by the seed is killed (SIGKILL) at a moment chosen by the
// seed (0.1-1.5 s in); every other rank must fail with an error naming that rank by number within the
// timeout (plus slack). Exit 0 when everything held, 1 otherwise.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/bootstrap.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace {

using namespace rdmakit;
using namespace rdmakit::coll;
using Clock = std::chrono::steady_clock;

struct Args {
  long iterations = 1000;
  int ranks = 4;
  std::string transport = "shm";
  std::uint64_t seed = 15;
  std::chrono::milliseconds timeout{3000};
  bool kill = false;
};

struct Resources {
  long fds = 0, threads = 0, rss_kib = 0;
};

Resources resources() {
  Resources r;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) r.fds += e->d_name[0] != '.';
    closedir(d);
    --r.fds;  // opendir's own
  }
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) r.threads = std::atol(line.c_str() + 8);
    if (line.rfind("VmRSS:", 0) == 0) r.rss_kib = std::atol(line.c_str() + 6);
  }
  return r;
}

std::string show(const Resources& r) {
  return "fds " + std::to_string(r.fds) + " threads " + std::to_string(r.threads) + " rss " +
         std::to_string(r.rss_kib) + " KiB";
}

// One allreduce of the sequence: the same on every rank (drawn from the seed alone).
struct Step {
  DataType type;
  std::size_t count;
};

Step draw(std::mt19937_64& rng) {
  static constexpr DataType kTypes[] = {DataType::F32, DataType::I32, DataType::F64, DataType::I64};
  DataType type = kTypes[rng() % 4];
  std::uint64_t pick = rng() % 100;
  std::size_t most = pick < 40 ? 16 : pick < 70 ? 1024 : pick < 97 ? 65536 : 1 << 20;
  return {type, 1 + rng() % most};
}

// Small integers, exact in every type whatever the order of the additions.
long value(int rank, long iteration, std::size_t i) {
  return static_cast<long>(
             (i * 7 + static_cast<std::size_t>(iteration) * 13 + static_cast<std::size_t>(rank) * 31) % 61) -
         20;
}

void put(DataType type, std::byte* at, long v) {
  switch (type) {
    case DataType::F32: {
      float x = static_cast<float>(v);
      std::memcpy(at, &x, 4);
      break;
    }
    case DataType::F64: {
      double x = static_cast<double>(v);
      std::memcpy(at, &x, 8);
      break;
    }
    case DataType::I32: {
      auto x = static_cast<std::int32_t>(v);
      std::memcpy(at, &x, 4);
      break;
    }
    default: {
      auto x = static_cast<std::int64_t>(v);
      std::memcpy(at, &x, 8);
    }
  }
}

// Fills this rank's contribution to `step`; checks the sum over every rank. Returns the first bad element
// or -1.
long check(DataType type, const std::byte* data, std::size_t count, int ranks, long iteration) {
  std::vector<std::byte> want(8);
  for (std::size_t i = 0; i < count; ++i) {
    long sum = 0;
    for (int r = 0; r < ranks; ++r) sum += value(r, iteration, i);
    put(type, want.data(), sum);
    if (std::memcmp(want.data(), data + i * size_of(type), size_of(type)) != 0) return static_cast<long>(i);
  }
  return -1;
}

void say(int fd, const std::string& line) {
  std::string text = line + "\n";
  [[maybe_unused]] auto written = ::write(fd, text.data(), text.size());  // one write: lines never interleave
}

int run_rank(int rank, const Args& a, std::uint16_t port, int report) {
  auto store = bootstrap::TcpStore::open({.host = "127.0.0.1",
                                          .port = port,
                                          .is_server = rank == 0,
                                          .timeout = std::chrono::milliseconds(20000)});
  if (!store) return say(report, "rank " + std::to_string(rank) + " store: " + store.error().describe()), 2;
  auto comm = Communicator::create(*store, rank, a.ranks,
                                   CommOptions{.network_transport = "tcp",
                                               .local_transport = a.transport,
                                               .timeout = a.timeout,
                                               .bootstrap_timeout = std::chrono::milliseconds(20000)});
  if (!comm) return say(report, "rank " + std::to_string(rank) + " create: " + comm.error().describe()), 2;
  Resources start = resources(), warm{};
  say(report, "READY " + std::to_string(rank));
  std::mt19937_64 rng(a.seed);
  std::vector<std::byte> data((1 << 20) * 8);
  long warm_up = std::min<long>(a.iterations / 10, 1000);
  std::uint64_t elements = 0;
  for (long it = 0; it < a.iterations; ++it) {
    if (it == warm_up) warm = resources();
    if (rank == 0 && !a.kill && a.iterations >= 10000 &&
        it % (a.iterations / 10) == 0)  // long runs show progress
      std::fprintf(stderr, "rank 0: %ld of %ld allreduces\n", it, a.iterations);
    Step step = draw(rng);
    for (std::size_t i = 0; i < step.count; ++i)
      put(step.type, data.data() + i * size_of(step.type), value(rank, it, i));
    auto done = (*comm)->allreduce(data.data(), data.data(), step.count, step.type, ReduceOp::Sum);
    if (!done)
      return say(report, "FAILED " + std::to_string(rank) + " iteration " + std::to_string(it) + ": " +
                             done.error().message()),
             3;
    if (long bad = check(step.type, data.data(), step.count, a.ranks, it); bad >= 0)
      return say(report, "WRONG " + std::to_string(rank) + " iteration " + std::to_string(it) + " element " +
                             std::to_string(bad) + " of " + std::to_string(step.count)),
             4;
    elements += step.count;
  }
  Resources end = resources();
  bool flat = end.fds <= warm.fds && end.threads <= warm.threads && end.rss_kib <= warm.rss_kib + 32 * 1024;
  say(report, std::string(flat ? "DONE " : "LEAK ") + std::to_string(rank) + " " +
                  std::to_string(a.iterations) + " allreduces, " + std::to_string(elements) +
                  " elements checked; start " + show(start) + "; warm " + show(warm) + "; end " + show(end));
  comm->reset();
  return flat ? 0 : 5;
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (k == "--kill") {
      a.kill = true;
      continue;
    }
    if (!v) return false;
    ++i;
    if (k == "-n")
      a.iterations = std::atol(v);
    else if (k == "--ranks")
      a.ranks = std::atoi(v);
    else if (k == "--transport")
      a.transport = v;
    else if (k == "--seed")
      a.seed = std::strtoull(v, nullptr, 10);
    else if (k == "--timeout-ms")
      a.timeout = std::chrono::milliseconds(std::atol(v));
    else
      return false;
  }
  return a.iterations > 0 && a.ranks >= 2 && a.ranks <= 64 && a.timeout.count() > 0;
}

std::uint16_t free_port() {
  auto server = bootstrap::TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
  return server ? (*server)->bound_port() : 0;
}

// Reads the report pipe until every rank has said `count` lines or the deadline passes.
std::vector<std::string> read_lines(FILE* in, std::size_t count) {
  std::vector<std::string> lines;
  char line[8192];
  while (lines.size() < count && std::fgets(line, sizeof(line), in)) {
    lines.emplace_back(line);
    if (!lines.back().empty() && lines.back().back() == '\n') lines.back().pop_back();
  }
  return lines;
}

// The ranks a failure message blames ("rank N died" / "rank N stopped responding").
std::set<int> blamed(const std::string& message) {
  static const std::regex pattern("rank ([0-9]+) (died|stopped responding)");
  std::set<int> out;
  for (std::sregex_iterator it(message.begin(), message.end(), pattern), end; it != end; ++it)
    out.insert(std::stoi((*it)[1]));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(
        stderr,
        "usage: rdmakit-coll-soak [-n N] [--ranks R] [--transport shm|tcp] [--seed S] [--timeout-ms T] "
        "[--kill]\n");
    return 2;
  }
  if (a.kill) a.iterations = 1L << 40;  // runs until the victim dies
  std::uint16_t port = free_port();
  int pipe_fds[2];
  if (port == 0 || ::pipe(pipe_fds) != 0) return std::fprintf(stderr, "no port or pipe\n"), 1;
  std::vector<pid_t> pids;
  for (int r = 0; r < a.ranks; ++r) {
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      ::close(pipe_fds[0]);
      _exit(run_rank(r, a, port, pipe_fds[1]));
    }
    pids.push_back(pid);
  }
  ::close(pipe_fds[1]);
  FILE* in = fdopen(pipe_fds[0], "r");
  auto ready = read_lines(in, static_cast<std::size_t>(a.ranks));
  bool ok = ready.size() == static_cast<std::size_t>(a.ranks);
  for (auto& line : ready) ok &= line.rfind("READY", 0) == 0;
  int victim = -1;
  Clock::time_point killed{};
  if (ok && a.kill) {
    std::mt19937_64 rng(a.seed ^ 0x6b696c6c);
    victim = static_cast<int>(rng() % static_cast<std::uint64_t>(a.ranks));
    auto delay = std::chrono::milliseconds(100 + rng() % 1400);
    std::this_thread::sleep_for(delay);  // a random point of the run: the fault, not a synchronisation
    ::kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
    killed = Clock::now();
    std::printf("killed rank %d after %ld ms\n", victim, static_cast<long>(delay.count()));
  }
  auto lines = read_lines(in, static_cast<std::size_t>(a.ranks - (victim >= 0 ? 1 : 0)));
  auto detected = Clock::now();
  for (auto& line : ready) std::printf("%s\n", line.c_str());
  for (auto& line : lines) {
    std::printf("%s\n", line.c_str());
    if (victim < 0) {
      ok &= line.rfind("DONE", 0) == 0;
    } else {
      ok &= line.rfind("FAILED", 0) == 0 && blamed(line) == std::set<int>{victim};
    }
  }
  ok &= lines.size() == static_cast<std::size_t>(a.ranks - (victim >= 0 ? 1 : 0));
  if (victim >= 0) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(detected - killed);
    std::printf("DETECT coll_rank_killed %s %ld ms (every survivor named rank %d)\n", a.transport.c_str(),
                static_cast<long>(ms.count()), victim);
    // The bound of the fault matrix (tests/reliability/fault_ops.hpp): the timeout plus max(1 s, timeout /
    // 2), plus RDMAKIT_TEST_FAULT_SLACK_MS (set by scripts/test.sh for the sanitizer builds).
    std::chrono::milliseconds bound =
        a.timeout + std::max<std::chrono::milliseconds>(std::chrono::seconds(1), a.timeout / 2);
    if (const char* env = std::getenv("RDMAKIT_TEST_FAULT_SLACK_MS"); env && *env)
      bound += std::chrono::milliseconds(std::strtol(env, nullptr, 10));
    if (ms > bound) {
      std::printf("detected after %ld ms, beyond the bound of %ld ms\n", static_cast<long>(ms.count()),
                  static_cast<long>(bound.count()));
      ok = false;
    }
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  std::fclose(in);
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
