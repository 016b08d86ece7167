// Limits: connections opened until the file-descriptor limit (RLIMIT_NOFILE, lowered for the purpose)
// refuses one. The refusal must be a clean error that names the limit; nothing may crash or hang; the
// connections made before keep working, and after they are released new connections carry transfers again.
//   reliability_limits <transport>
// The scenario runs in a child process (forked before any thread exists), so that a crash or a hang is
// reported by the parent instead of taking the test runner down, and the lowered limit stays in the child.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/context.hpp"

namespace {

using namespace rdmakit;
using namespace std::chrono_literals;

constexpr long kHeadroom = 48;         // fds allowed beyond those open when the limit is lowered
constexpr int kMaxConnections = 1000;  // far beyond what kHeadroom allows: the limit must refuse first
constexpr unsigned kHangSeconds = 120;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "reliability_limits: FAIL: %s\n", message.c_str());
  std::fflush(stderr);
  _exit(1);
}

long open_fds() {
  long n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n - 1;  // opendir's own
}

struct Pair {
  std::shared_ptr<Connection> initiator, target;
};

bool names_the_limit(const Error& error) {
  const std::string& m = error.message();
  return error.sys_errno() == EMFILE || m.find("Too many open files") != std::string::npos ||
         m.find("RLIMIT_NOFILE") != std::string::npos;
}

// A connection from `initiator` to `listener`, or the error of whichever side refused it.
Result<Pair> connect_pair(Context& initiator, Listener& listener) {
  std::optional<Result<std::shared_ptr<Connection>>> accepted;
  std::thread acceptor([&] { accepted = listener.accept(10s); });
  auto connected = initiator.connect(listener.address());
  acceptor.join();
  if (!connected && !*accepted)
    std::fprintf(stderr, "both sides refused: connect: %s; accept: %s\n",
                 connected.error().describe().c_str(), accepted->error().describe().c_str());
  // The side that ran into the limit names it; the other may only see its peer vanish or time out.
  if (!*accepted && (connected || names_the_limit(accepted->error())))
    return std::unexpected(accepted->error());
  if (!connected) return std::unexpected(connected.error());
  return Pair{*connected, **accepted};
}

// A 64 KiB WRITE over `pair` that must land byte for byte.
void check_transfer(Context& initiator, Context& target, const Pair& pair, unsigned char seed,
                    const char* when) {
  constexpr std::size_t kBytes = 64 << 10;
  auto source = initiator.allocate(kBytes, Access::LocalWrite);
  auto sink = target.allocate(kBytes, Access::All);
  if (!source || !sink)
    fail(std::string(when) + ": allocate: " + (source ? sink.error() : source.error()).describe());
  auto* bytes = static_cast<unsigned char*>((*source)->data());
  for (std::size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 31 + seed);
  auto id = pair.initiator->write((*source)->slice(0, kBytes), (*sink)->descriptor().at(0));
  if (!id) fail(std::string(when) + ": write: " + id.error().describe());
  auto done = pair.initiator->wait(*id, 30s);
  if (!done) fail(std::string(when) + ": wait: " + done.error().describe());
  if (!done->ok()) fail(std::string(when) + ": write completed " + std::string(to_string(done->status)));
  if (std::memcmp((*sink)->data(), bytes, kBytes) != 0)
    fail(std::string(when) + ": the written bytes did not land");
}

int child(const std::string& transport) {
  alarm(kHangSeconds);  // a hang ends in SIGALRM, which the parent reports
  Options options;
  options.transport = transport;
  // The connecting side of the refused connection waits this long for the handshake (the refusing
  // listener never answers): short, so that the test is quick.
  options.connect_timeout = 2s;
  options.name = "limits-target";
  auto target = Context::open(options);
  options.name = "limits-initiator";
  auto initiator = Context::open(options);
  if (!target || !initiator) fail("open: " + (target ? initiator.error() : target.error()).describe());
  auto listener = (*target)->listen();
  if (!listener) fail("listen: " + listener.error().describe());

  long before = open_fds();
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = static_cast<rlim_t>(before + kHeadroom);
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) fail(std::string("setrlimit: ") + std::strerror(errno));

  std::vector<Pair> pairs;
  std::optional<Error> refusal;
  while (static_cast<int>(pairs.size()) < kMaxConnections) {
    auto pair = connect_pair(**initiator, **listener);
    if (!pair) {
      refusal = pair.error();
      break;
    }
    pairs.push_back(*pair);
  }
  if (!refusal)
    fail(std::to_string(kMaxConnections) + " connections opened under a limit of " +
         std::to_string(before + kHeadroom) + " fds");
  std::printf("%s: %zu connections open at %ld fds (limit %ld), the next refused: %s\n", transport.c_str(),
              pairs.size(), open_fds(), before + kHeadroom, refusal->describe().c_str());
  if (pairs.empty()) fail("not even one connection opened under the limit");
  if (!names_the_limit(*refusal)) fail("the refusal does not name the fd limit: " + refusal->describe());

  // What exists keeps working at the limit... (a 64 KiB region may itself need an fd: release one first)
  pairs.pop_back();
  check_transfer(**initiator, **target, pairs.front(), 1, "at the limit");
  // ...and after a release, new connections carry transfers again.
  for (auto& p : pairs) {
    p.initiator->close();
    p.target->close();
  }
  pairs.clear();
  for (int i = 0; i < 4; ++i) {
    auto pair = connect_pair(**initiator, **listener);
    if (!pair) fail("connect after the release: " + pair.error().describe());
    check_transfer(**initiator, **target, *pair, static_cast<unsigned char>(i + 2), "after the release");
  }
  std::printf("%s: after the release new connections work (fds %ld)\n", transport.c_str(), open_fds());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: reliability_limits <transport>\n");
    return 2;
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    return 1;
  }
  if (pid == 0) _exit(child(argv[1]));
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) {
    std::perror("waitpid");
    return 1;
  }
  if (WIFSIGNALED(status)) {
    std::fprintf(stderr, "reliability_limits: FAIL: the child died of signal %d (%s)%s\n", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), WTERMSIG(status) == SIGALRM ? ": it hung" : "");
    return 1;
  }
  if (WEXITSTATUS(status) != 0) return 1;
  std::printf("reliability_limits: PASS\n");
  return 0;
}
