// Limits of registrations, shared memory and completion queues (issue 15 item 3): each resource is taken
// until the transport refuses; the refusal must be a clean error that names the limit, nothing may crash or
// hang, what exists keeps working at the limit, and after a release the resource can be taken again.
//   reliability_resource_limits registrations shm   the shm registration slots (a fixed table peers read)
//   reliability_resource_limits arena shm           allocate() until the shared arena has no room
//   reliability_resource_limits cq_depth <transport> a connection's shared completion queue overflowing
//   reliability_resource_limits oom tcp             the target out of memory for new registrations: in a
//                                                   child process with RLIMIT_AS lowered, allocate() until
//                                                   refused (not under ASan/TSan: their shadow memory needs
//                                                   terabytes of address space, so RLIMIT_AS cannot be set)
// tcp has no registration limit short of the 2^24 keys a context issues in its life (core/key_source.hpp)
// and no arena: registering memory costs it a table entry, so those two cases are shm only.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/context.hpp"

namespace {

using namespace rdmakit;
using namespace std::chrono_literals;

constexpr unsigned kWatchdogSeconds = 120;

struct Pair {
  std::shared_ptr<Context> initiator, target;
  std::shared_ptr<Connection> connection, accepted;
};

std::string open_pair(const std::string& transport, Pair& pair, const ConnectOptions& options = {}) {
  auto target = Context::open(Options{.transport = transport, .name = "limits-target"});
  auto initiator = Context::open(Options{.transport = transport, .name = "limits-initiator"});
  if (!target || !initiator) return "open: " + (target ? initiator.error() : target.error()).describe();
  pair.target = *target;
  pair.initiator = *initiator;
  auto listener = pair.target->listen();
  if (!listener) return "listen: " + listener.error().describe();
  std::optional<Result<std::shared_ptr<Connection>>> accepted;
  std::thread acceptor([&] { accepted = (*listener)->accept(10s); });
  auto connected = pair.initiator->connect((*listener)->address(), options);
  acceptor.join();
  if (!connected) return "connect: " + connected.error().describe();
  if (!*accepted) return "accept: " + accepted->error().describe();
  pair.connection = *connected;
  pair.accepted = **accepted;
  return {};
}

// A 4 KiB WRITE into `sink` that must land byte for byte.
std::string check_write(Pair& pair, const MemoryRegion& sink, unsigned char seed, const char* when) {
  auto source = pair.initiator->allocate(4096, Access::LocalWrite);
  if (!source) return std::string(when) + ": allocate a source: " + source.error().describe();
  std::memset((*source)->data(), seed, 4096);
  auto id = pair.connection->write((*source)->slice(0, 4096), sink.descriptor().at(0));
  if (!id) return std::string(when) + ": write: " + id.error().describe();
  auto done = pair.connection->wait(*id, 30s);
  if (!done || !done->ok())
    return std::string(when) + ": the write " +
           (done ? std::string(to_string(done->status)) : done.error().describe());
  if (std::memcmp(sink.data(), (*source)->data(), 4096) != 0)
    return std::string(when) + ": the bytes did not land";
  return {};
}

bool names(const Error& error, const char* words) {
  return error.code() == Errc::ResourceExhausted && error.message().find(words) != std::string::npos;
}

// Registrations of 4 KiB pieces of one buffer until the transport refuses one.
std::string registrations(const std::string& transport) {
  Pair pair;
  if (auto bad = open_pair(transport, pair); !bad.empty()) return bad;
  constexpr std::size_t kPiece = 4096, kMost = 1 << 20;
  std::vector<unsigned char> buffer(kPiece * 64);
  std::vector<std::shared_ptr<MemoryRegion>> regions;
  std::optional<Error> refusal;
  while (regions.size() < kMost) {
    auto region =
        pair.target->register_memory(buffer.data() + kPiece * (regions.size() % 64), kPiece, Access::All);
    if (!region) {
      refusal = region.error();
      break;
    }
    regions.push_back(*region);
  }
  if (!refusal) return std::to_string(kMost) + " registrations and no refusal";
  std::printf("registrations %s: %zu held, the next refused: %s\n", transport.c_str(), regions.size(),
              refusal->describe().c_str());
  if (!names(*refusal, "registration slots"))
    return "the refusal does not name the limit: " + refusal->describe();
  if (auto bad = check_write(pair, *regions.back(), 1, "at the limit"); !bad.empty()) return bad;
  regions.clear();
  auto again = pair.target->register_memory(buffer.data(), kPiece, Access::All);
  if (!again) return "register after the release: " + again.error().describe();
  return check_write(pair, **again, 2, "after the release");
}

// allocate() of `piece`-byte regions into `regions` until the context refuses one (its error), at most 1024.
std::optional<Error> allocate_until_refused(Context& context, std::size_t piece,
                                            std::vector<std::shared_ptr<MemoryRegion>>& regions) {
  while (regions.size() < 1024) {
    auto region = context.allocate(piece, Access::All);
    if (!region) return region.error();
    regions.push_back(*region);
  }
  return std::nullopt;
}

// allocate() of 1 GiB regions until the shared arena has no room (its pages are holes until touched).
std::string arena(const std::string& transport) {
  Pair pair;
  if (auto bad = open_pair(transport, pair); !bad.empty()) return bad;
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  std::vector<std::shared_ptr<MemoryRegion>> regions;
  std::optional<Error> refusal = allocate_until_refused(*pair.target, kPiece, regions);
  if (!refusal) return "1 TiB allocated and no refusal";
  std::printf("arena %s: %zu GiB held, the next refused: %s\n", transport.c_str(), regions.size(),
              refusal->describe().c_str());
  if (!names(*refusal, "arena")) return "the refusal does not name the limit: " + refusal->describe();
  if (regions.empty()) return "not one region fitted";
  if (auto bad = check_write(pair, *regions.back(), 3, "at the limit"); !bad.empty()) return bad;
  regions.pop_back();
  auto again = pair.target->allocate(kPiece, Access::All);
  if (!again) return "allocate after a release: " + again.error().describe();
  return check_write(pair, **again, 4, "after the release");
}

// A completion queue of depth 8 shared by a connection: 9 unpolled completions overflow it. The overflow
// is an error naming the depth (as a verbs CQ overrun), nothing crashes, and a new queue works.
std::string cq_depth(const std::string& transport) {
  Pair probe;
  if (auto bad = open_pair(transport, probe); !bad.empty()) return bad;
  auto cq = probe.initiator->create_cq(8);
  if (!cq) return "create_cq: " + cq.error().describe();
  Pair pair;
  if (auto bad = open_pair(transport, pair, ConnectOptions{.send_cq = *cq}); !bad.empty()) return bad;
  auto sink = pair.target->allocate(4096, Access::All);
  auto source = pair.initiator->allocate(4096, Access::LocalWrite);
  if (!sink || !source) return "allocate failed";
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 9; ++i) {
    auto id = pair.connection->write((*source)->slice(0, 64), (*sink)->descriptor().at(64 * i));
    if (!id) return "write #" + std::to_string(i) + ": " + id.error().describe();
    ids.push_back(*id);
  }
  // Nothing is polled (a wait would take completions out of the queue): watch the queue's state until the
  // ninth completion has overflowed it.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((*cq)->health() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  auto health = (*cq)->health();
  if (health) return "9 completions and a queue of depth 8 did not overflow";
  std::printf("cq_depth %s: %s\n", transport.c_str(), health.error().describe().c_str());
  if (!names(health.error(), "depth of 8"))
    return "the overflow does not name the depth: " + health.error().describe();
  if (auto last = (*cq)->wait_for(ids.back(), 1s); last || last.error().code() != Errc::ResourceExhausted)
    return "waiting on an overflowed queue did not return its error";
  Completion taken[16];
  std::size_t polled = (*cq)->poll(taken);
  if (polled != 8)
    return "the overflowed queue returned " + std::to_string(polled) + " completions, not its 8";
  Pair fresh;  // after the release, a new queue and connection work
  if (auto bad = open_pair(transport, fresh); !bad.empty()) return bad;
  auto fresh_sink = fresh.target->allocate(4096, Access::All);
  if (!fresh_sink) return "allocate failed";
  return check_write(fresh, **fresh_sink, 5, "after the overflow");
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

long vm_size_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::strtol(line.c_str() + 7, nullptr, 10);
  return -1;
}

// The child's side of oom: everything is set up first (contexts, connection, the WRITE's source and sink),
// then the address space is capped 256 MiB above what is mapped, and 16 MiB regions are allocated until
// allocate() refuses one.
std::string oom_child(const std::string& transport) {
  Pair pair;
  if (auto bad = open_pair(transport, pair); !bad.empty()) return bad;
  auto sink = pair.target->allocate(4096, Access::All);
  auto source = pair.initiator->allocate(4096, Access::LocalWrite);
  if (!sink || !source) return "allocate the WRITE's regions failed";
  auto write = [&](unsigned char seed, const char* when) -> std::string {
    std::memset((*source)->data(), seed, 4096);
    auto id = pair.connection->write((*source)->slice(0, 4096), (*sink)->descriptor().at(0));
    if (!id) return std::string(when) + ": write: " + id.error().describe();
    auto done = pair.connection->wait(*id, 30s);
    if (!done || !done->ok())
      return std::string(when) + ": the write " +
             (done ? std::string(to_string(done->status)) : done.error().describe());
    if (std::memcmp((*sink)->data(), (*source)->data(), 4096) != 0)
      return std::string(when) + ": the bytes did not land";
    return {};
  };
  if (auto bad = write(6, "before the limit"); !bad.empty()) return bad;
  long mapped = vm_size_kib();
  if (mapped <= 0) return "cannot read VmSize";
  constexpr std::size_t kPiece = 16 << 20, kHeadroom = 256 << 20;
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0) return "getrlimit failed";
  limit.rlim_cur = static_cast<rlim_t>(mapped) * 1024 + kHeadroom;
  if (setrlimit(RLIMIT_AS, &limit) != 0)
    return "setrlimit(RLIMIT_AS) failed: " + std::string(strerror(errno));
  std::vector<std::shared_ptr<MemoryRegion>> regions;
  std::optional<Error> refusal = allocate_until_refused(*pair.target, kPiece, regions);
  if (!refusal) return "16 GiB allocated under a 256 MiB headroom and no refusal";
  std::printf("oom %s: %zu regions of 16 MiB held (%zu registrations), the next refused: %s\n",
              transport.c_str(), regions.size(), pair.target->live_registrations(),
              refusal->describe().c_str());
  if (!names(*refusal, "RLIMIT_AS")) return "the refusal does not name the limit: " + refusal->describe();
  if (regions.empty()) return "not one region fitted under the limit";
  if (auto bad = write(7, "at the limit"); !bad.empty()) return bad;
  std::size_t before = pair.target->live_registrations();
  regions.pop_back();
  if (pair.target->live_registrations() != before - 1)
    return "a released region is still counted as registered";
  auto again = pair.target->allocate(kPiece, Access::All);
  if (!again) return "allocate after a release: " + again.error().describe();
  std::memset((*again)->data(), 8, kPiece);  // the memory is really there
  return write(9, "after the release");
}

// Forks: RLIMIT_AS then applies to the child only, and the child sets up its own contexts (their threads do
// not survive a fork).
std::string oom(const std::string& transport) {
  if (kSanitized)
    return "oom cannot run under AddressSanitizer or ThreadSanitizer (their shadow memory needs terabytes "
           "of address space, so RLIMIT_AS cannot be lowered); CMake does not register it there";
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    alarm(kWatchdogSeconds);
    std::string failure = oom_child(transport);
    if (!failure.empty()) std::fprintf(stderr, "oom child: %s\n", failure.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(failure.empty() ? 0 : 1);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status)) return "the child died of signal " + std::to_string(WTERMSIG(status));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the child failed (above)";
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  static const std::map<std::string, std::function<std::string(const std::string&)>> cases{
      {"registrations", registrations}, {"arena", arena}, {"cq_depth", cq_depth}, {"oom", oom}};
  auto found = argc == 3 ? cases.find(argv[1]) : cases.end();
  if (found == cases.end()) {
    std::fprintf(stderr, "usage: reliability_resource_limits registrations|arena|cq_depth|oom <transport>\n");
    return 2;
  }
  alarm(kWatchdogSeconds);  // a hang ends in SIGALRM: a failure
  std::string failure = found->second(argv[2]);
  if (!failure.empty()) {
    std::fprintf(stderr, "reliability_resource_limits %s %s: FAIL: %s\n", argv[1], argv[2], failure.c_str());
    return 1;
  }
  std::printf("reliability_resource_limits %s %s: PASS\n", argv[1], argv[2]);
  return 0;
}
