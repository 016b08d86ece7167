// WRITE over the shm transport next to a plain memcpy of the same size between the same kind of buffers,
// in one run: 8-byte latency and bandwidth from 1 MiB up, into a target process's allocate()'d memory
// (shared mapping) and into its plain heap memory (cross-memory attach). The target is a forked child that
// only listens; it does nothing while we write. Sizes in bytes on the command line (default 8 1 MiB 16 MiB
// 256 MiB; 256 MiB is above glibc's non-temporal threshold on the 2-vCPU bench VM, so memcpy and the
// transport both stream there).
//
//   g++ -std=c++23 -O2 -Iinclude bench/shm_write_bench.cpp -Lbuild -lrdmakit
//       -Wl,-rpath,$PWD/build -o build/shm_write_bench && taskset -c 1 build/shm_write_bench [SIZE...]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdmakit/rdmakit.hpp"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using namespace rdmakit;

namespace {

constexpr auto kMinTime = 500ms;

[[noreturn]] void target(int out, std::size_t largest) {
  auto ctx = Context::open(Options{.transport = "shm"}).value();
  auto mapped = ctx->allocate(largest, Access::All).value();
  static std::vector<std::byte> heap(largest);
  auto registered = ctx->register_memory(heap.data(), heap.size(), Access::All).value();
  auto listener = ctx->listen().value();
  std::string line = listener->address() + " " + mapped->descriptor().to_hex() + " " +
                     registered->descriptor().to_hex() + "\n";
  if (::write(out, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(1);
  auto connection = listener->accept(10s).value();
  for (;;) ::pause();
}

// Runs `op` until kMinTime passed; returns seconds per call.
template <typename F>
double time_per_call(F&& op) {
  for (int i = 0; i < 100; ++i) op();  // warm-up
  std::size_t calls = 0;
  auto start = Clock::now();
  auto now = start;
  while (now - start < kMinTime) {
    for (int i = 0; i < 16; ++i) op();
    calls += 16;
    now = Clock::now();
  }
  return std::chrono::duration<double>(now - start).count() / static_cast<double>(calls);
}

void write_once(Connection& c, Segment local, RemoteAddress remote) {
  auto id = c.write(local, remote).value();
  auto done = c.wait(id, 10s).value();
  if (!done.ok()) {
    std::fprintf(stderr, "write failed: %s\n", std::string(to_string(done.status)).c_str());
    std::exit(1);
  }
}

void report(const char* what, std::size_t size, double seconds) {
  if (size <= 8)
    std::printf("  %-34s %10.3f us\n", what, seconds * 1e6);
  else
    std::printf("  %-34s %10.2f GB/s  (%.1f us per op)\n", what, static_cast<double>(size) / seconds / 1e9,
                seconds * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 0));
  if (sizes.empty()) sizes = {8, std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20};
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return 1;
  pid_t child = ::fork();
  if (child == 0) target(pipe_fds[1], largest);
  ::close(pipe_fds[1]);
  char buffer[1024] = {};
  std::size_t got = 0;
  while (got < sizeof(buffer) - 1 && ::read(pipe_fds[0], buffer + got, 1) == 1 && buffer[got] != '\n') ++got;
  buffer[got] = '\0';
  char address[256], mapped_hex[200], heap_hex[200];
  if (std::sscanf(buffer, "%255s %199s %199s", address, mapped_hex, heap_hex) != 3) return 1;
  RemoteRegion mapped = RemoteRegion::from_hex(mapped_hex).value();
  RemoteRegion heap = RemoteRegion::from_hex(heap_hex).value();

  auto ctx = Context::open(Options{.transport = "shm", .wait_mode = WaitMode::Spin}).value();
  auto connection = ctx->connect(address).value();
  auto source = ctx->allocate(largest, Access::All).value();
  auto copy_target = ctx->allocate(largest, Access::All).value();
  std::memset(source->data(), 0x5a, largest);
  std::memset(copy_target->data(), 1, largest);  // touch the pages, as the target's are after a first write

  std::printf("shm WRITE vs memcpy (one run, pid %d -> target pid %d)\n", ::getpid(), child);
  for (std::size_t size : sizes) {
    std::printf("%zu bytes:\n", size);
    auto* src = static_cast<std::byte*>(source->data());
    auto* dst = static_cast<std::byte*>(copy_target->data());
    report("memcpy", size, time_per_call([&] {
             std::memcpy(dst, src, size);
             asm volatile("" ::: "memory");
           }));
    auto seg = source->slice(0, static_cast<std::uint32_t>(size));
    report("WRITE into allocate() memory", size,
           time_per_call([&] { write_once(*connection, seg, mapped.at(0)); }));
    report("WRITE into registered heap memory", size,
           time_per_call([&] { write_once(*connection, seg, heap.at(0)); }));
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return 0;
}
