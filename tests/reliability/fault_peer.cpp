// The fault matrix's peer process and the patterns (fault_layout.hpp).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "rdmakit/context.hpp"
#include "reliability/fault_layout.hpp"

extern char** environ;

namespace rdmakit::faults {

std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t offset) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + offset;  // splitmix64 of (seed, offset)
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void fill_pattern(void* base, std::uint64_t offset, std::uint64_t length, std::uint64_t seed) {
  auto* words = static_cast<std::uint64_t*>(base);
  for (std::uint64_t at = offset; at < offset + length; at += 8) words[at / 8] = pattern_word(seed, at);
}

std::int64_t find_mismatch(const void* base, std::uint64_t offset, std::uint64_t length, std::uint64_t seed,
                           std::uint64_t expected_offset) {
  const auto* words = static_cast<const std::uint64_t*>(base);
  for (std::uint64_t i = 0; i < length; i += 8)
    if (words[(offset + i) / 8] != pattern_word(seed, expected_offset + i))
      return static_cast<std::int64_t>(offset + i);
  return -1;
}

namespace {

int peer_fail(const std::string& what, const Error& error) {
  std::fprintf(stderr, "fault peer: %s: %s\n", what.c_str(), error.describe().c_str());
  return 1;
}

bool stdin_closed() {
  pollfd p{0, POLLIN, 0};
  char byte;
  return ::poll(&p, 1, 0) > 0 && ::read(0, &byte, 1) <= 0;
}

}  // namespace

// Registers the memfd, listens, and accepts connections until stdin closes, posting kSlotCount receives
// (one per slot) on each and saying "ACCEPTED". Its CPU is needed only where the transport needs it.
int run_peer(int argc, char** argv) {
  if (argc != 6) return std::fprintf(stderr, "fault peer: bad arguments\n"), 2;
  std::chrono::milliseconds timeout(std::stol(argv[4]));
  Options options{.transport = argv[2], .name = "fault-peer", .timeout = timeout, .rnr_timeout = timeout / 2};
  auto context = Context::open(options);
  if (!context) return peer_fail("open", context.error());
  void* memory = ::mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_SHARED, std::stoi(argv[3]), 0);
  if (memory == MAP_FAILED) return std::perror("fault peer: mmap"), 1;
  auto region = (*context)->register_memory(memory, kRegionSize, Access::All);
  if (!region) return peer_fail("register", region.error());
  std::string listen = argv[5];
  auto listener = (*context)->listen(listen == "-" ? "" : listen);
  if (!listener) return peer_fail("listen", listener.error());
  std::printf("READY %s %s\n", (*listener)->address().c_str(), (*region)->descriptor().to_hex().c_str());
  std::fflush(stdout);
  std::vector<std::shared_ptr<Connection>> connections;
  while (!stdin_closed()) {
    auto connection = (*listener)->accept(std::chrono::milliseconds(100));
    if (!connection) continue;
    for (int slot = 0; slot < kSlotCount; ++slot)
      if (auto posted = (*connection)->post_recv((*region)->slice(kSlots + slot * kSlotSize, kSlotSize));
          !posted)
        return peer_fail("post_recv", posted.error());
    connections.push_back(*connection);
    std::printf("ACCEPTED\n");
    std::fflush(stdout);
  }
  return 0;
}

bool PeerProcess::start(const std::string& transport, int memfd, std::chrono::milliseconds timeout,
                        const std::string& listen, const std::string& netns) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::string fd = std::to_string(memfd), ms = std::to_string(timeout.count());
  std::vector<const char*> args;
  if (!netns.empty()) args = {"/usr/sbin/ip", "netns", "exec", netns.c_str()};
  char exe[4096] = {};
  if (::readlink("/proc/self/exe", exe, sizeof(exe) - 1) <= 0) return false;
  for (const char* a : {static_cast<const char*>(exe), "--peer", transport.c_str(), fd.c_str(), ms.c_str(),
                        listen.empty() ? "-" : listen.c_str()})
    args.push_back(a);
  args.push_back(nullptr);
  int rc = posix_spawn(&pid_, args[0], &actions, nullptr, const_cast<char**>(args.data()), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  stdin_ = in[1];
  stdout_ = out[0];
  if (rc != 0) pid_ = -1;
  std::string line, ready, hex;
  if (rc != 0 || !read_line(&line)) return false;
  std::istringstream words(line);
  words >> ready >> address_ >> hex;
  auto region = RemoteRegion::from_hex(hex);
  if (ready != "READY" || !region) return false;
  region_ = *region;
  return true;
}

PeerProcess::~PeerProcess() {
  signal(SIGKILL);
  if (stdin_ >= 0) ::close(stdin_);
  if (stdout_ >= 0) ::close(stdout_);
}

bool PeerProcess::read_line(std::string* line) {
  line->clear();
  char c = 0;
  while (c != '\n') {
    pollfd p{stdout_, POLLIN, 0};
    if (::poll(&p, 1, 30000) <= 0 || ::read(stdout_, &c, 1) != 1) return false;
    *line += c;
  }
  return true;
}

bool PeerProcess::accepted() {
  std::string line;
  return read_line(&line) && line == "ACCEPTED\n";
}

void PeerProcess::signal(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  int status = 0;
  if (sig == SIGSTOP) ::waitpid(pid_, &status, WUNTRACED);
  if (sig == SIGKILL) {
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

bool PeerProcess::finish() {
  if (pid_ <= 0) return true;
  ::close(stdin_);
  stdin_ = -1;
  int status = 0;
  bool exited = ::waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  pid_ = -1;
  return exited;
}

}  // namespace rdmakit::faults
