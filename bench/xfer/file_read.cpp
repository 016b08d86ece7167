// Remote file-segment READ throughput at a fixed queue depth: the transfer engine's side of the
// `fio --direct=1 --rw=randread --bs=B --iodepth=Q` comparison (bench/xfer/dataloader.sh builds and runs it).
//
//   file_read --file PATH [--bs 4194304] [--iodepth 16] [--seconds 5] [--transport tcp|shm]
//   [--memory|--local]
//
// A child process is the owner: it publishes PATH with publish_file (or, with --memory, the file's bytes
// in a memory segment of the same size: the engine's own memory-segment READ, for the third column). The
// parent keeps `iodepth` READs of `bs` bytes at random bs-aligned offsets in flight, as fio does (one
// single-request batch per slot, the oldest waited for and resubmitted; each block once at most, as fio's
// random map), for `seconds` or one pass over the file, and prints
// "MB/s <value> IOPS <value>"; every request's status is checked, and the first 64 bytes of one request in
// 64 against the file. The owner is on this host, but the reader sends every READ to it as a reader on
// another host would (EngineOptions::file_local_reads off: the remote path is what is measured); --local
// lets the reader read the file itself (the same-host path). Either way each batch's paths() must say the
// path measured, or the run fails.
//   g++ -std=c++23 -O2 -Iinclude bench/xfer/file_read.cpp -Lbuild -lrdmakit -Wl,-rpath,$PWD/build
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/xfer/engine.hpp"
#include "rdmakit/xfer/metadata.hpp"

namespace {

using namespace std::chrono_literals;
using namespace rdmakit::xfer;

struct Args {
  std::string file, transport = "tcp";
  std::uint64_t bs = 4 << 20;
  std::size_t iodepth = 16;
  double seconds = 5;
  bool memory = false;
  bool local = false;
};

template <typename T>
T must(rdmakit::Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "file_read: %s: %s\n", what, r.error().describe().c_str());
    std::exit(1);
  }
  return std::move(*r);
}
void must(rdmakit::Result<void> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "file_read: %s: %s\n", what, r.error().describe().c_str());
    std::exit(1);
  }
}

// The owner: publishes, then waits for the parent to close the pipe.
int owner(const Args& a, const std::string& url, int quit) {
  auto store = must(open_metadata(url, {.name_space = "file-read"}), "metadata");
  auto engine = must(Engine::create(*store, {.name = "owner", .transports = {a.transport}}), "owner engine");
  if (a.memory) {
    std::ifstream in(a.file, std::ios::binary | std::ios::ate);
    // At most 1 GiB of it: the memory segment's READs are memory-bound, and a file of several GiB read
    // into memory would cost the run its time (and the shm arena its room).
    auto size = std::min<std::size_t>(static_cast<std::size_t>(in.tellg()), std::size_t{1} << 30);
    // Filled before it is published: a reader never sees it half read.
    auto segment = must(engine->allocate_unpublished("bench", size), "allocate_unpublished");
    in.seekg(0);
    in.read(reinterpret_cast<char*>(segment.data()), static_cast<std::streamsize>(size));
    must(engine->publish_ready("bench"), "publish_ready");
  } else {
    must(engine->publish_file("bench", a.file), "publish_file");
  }
  char byte;
  (void)::read(quit, &byte, 1);
  return 0;
}

int reader(const Args& a, const std::string& url) {
  auto store = must(open_metadata(url, {.name_space = "file-read"}), "metadata");
  auto engine = must(
      Engine::create(*store, {.name = "reader", .transports = {a.transport}, .file_local_reads = a.local}),
      "reader engine");
  rdmakit::Result<SegmentHandle> segment = rdmakit::fail(rdmakit::Errc::NotFound, "");
  for (int i = 0; i < 3000 && !(segment = engine->open_segment("bench")); ++i)
    std::this_thread::sleep_for(10ms);
  auto handle = must(std::move(segment), "open_segment");
  auto size = must(engine->segment_info(handle), "segment_info").length;
  if (size < a.bs) return std::fprintf(stderr, "file_read: the file is smaller than --bs\n"), 1;
  // Out of the page cache (the file was just written, or read by an earlier run), as fio invalidates it
  // before a job: the owner reads O_DIRECT, and a reader that reads the file itself (--local) starts cold.
  if (int fd = ::open(a.file.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  auto* memory = static_cast<std::byte*>(std::aligned_alloc(4096, a.bs * a.iodepth));
  must(engine->register_local(memory, a.bs * a.iodepth), "register_local");
  std::ifstream check(a.file, std::ios::binary);
  // Each block at most once, in random order (fio's random map): no read is served by the page cache from
  // an earlier one of this run, whichever path reads the file.
  std::vector<std::uint64_t> blocks(size / a.bs);
  for (std::size_t b = 0; b < blocks.size(); ++b) blocks[b] = b;
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(7));
  std::size_t next_block = 0;
  std::vector<std::shared_ptr<Batch>> slots(a.iodepth);
  std::vector<std::uint64_t> offsets(a.iodepth);
  // Whichever READ finishes first is replaced first, as fio reaps any completion: waiting for the oldest
  // would leave the slots behind a slow read idle and run at a lower queue depth than fio.
  // Shared with the callbacks, which may run on the engine's threads after their batch says done().
  struct Finished {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::size_t> slots;
  };
  auto finished = std::make_shared<Finished>();
  auto submit = [&](std::size_t i) {
    offsets[i] = blocks[next_block++ % blocks.size()] * a.bs;
    std::vector<Request> one{{Op::Read, memory + i * a.bs, handle, offsets[i], a.bs}};
    slots[i] = must(engine->submit(one,
                                   [finished, i](Batch&) {
                                     std::lock_guard lock(finished->mutex);
                                     finished->slots.push_back(i);
                                     finished->cv.notify_one();
                                   }),
                    "submit");
  };
  auto next_finished = [&] {
    std::unique_lock lock(finished->mutex);
    if (!finished->cv.wait_for(lock, 60s, [&] { return !finished->slots.empty(); })) {
      std::fprintf(stderr, "file_read: no READ finished in 60 s\n");
      std::exit(1);
    }
    std::size_t i = finished->slots.front();
    finished->slots.pop_front();
    return i;
  };
  for (std::size_t i = 0; i < a.iodepth; ++i) submit(i);
  std::uint64_t done = 0;
  auto start = std::chrono::steady_clock::now();
  auto end = start + std::chrono::duration<double>(a.seconds);
  while (true) {
    const std::size_t i = next_finished();
    must(slots[i]->wait(60s), "wait");
    must(*slots[i]->status(0), "READ");
    if (!a.memory && slots[i]->paths().file_requests_local != (a.local ? 1u : 0u))
      return std::fprintf(stderr, "file_read: a READ took another path than measured (%s)\n",
                          to_string(slots[i]->paths()).c_str()),
             1;
    if (++done % 64 == 0) {
      char head[64];
      check.seekg(static_cast<std::streamoff>(offsets[i]));
      check.read(head, sizeof head);
      if (std::memcmp(head, memory + i * a.bs, sizeof head) != 0)
        return std::fprintf(stderr, "file_read: wrong bytes at %llu\n", (unsigned long long)offsets[i]), 1;
    }
    if (std::chrono::steady_clock::now() >= end || next_block >= blocks.size()) break;
    submit(i);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& slot : slots) (void)slot->wait(60s);
  std::printf("MB/s %.1f IOPS %.0f\n", done * a.bs / seconds / 1e6, done / seconds);
  must(engine->unregister_local(memory), "unregister_local");
  std::free(memory);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--memory" || flag == "--local") {
      (flag == "--memory" ? a.memory : a.local) = true;
      continue;
    }
    if (i + 1 >= argc) return std::fprintf(stderr, "file_read: %s needs a value\n", flag.c_str()), 2;
    std::string v = argv[++i];
    if (flag == "--file")
      a.file = v;
    else if (flag == "--bs")
      a.bs = std::stoull(v);
    else if (flag == "--iodepth")
      a.iodepth = std::stoul(v);
    else if (flag == "--seconds")
      a.seconds = std::stod(v);
    else if (flag == "--transport")
      a.transport = v;
    else
      return std::fprintf(stderr, "file_read: unknown option %s\n", flag.c_str()), 2;
  }
  if (a.file.empty() || a.bs == 0 || a.iodepth == 0)
    return std::fprintf(stderr, "file_read: --file PATH\n"), 2;
  // Fork before any thread exists (the metadata server has one); the child learns the URL through a pipe,
  // and the parent closing the other pipe tells it to stop.
  int url_pipe[2], quit[2];
  if (::pipe(url_pipe) != 0 || ::pipe(quit) != 0) return 1;
  pid_t child = ::fork();
  if (child == 0) {
    ::close(url_pipe[1]);
    ::close(quit[1]);
    char url[256] = {};
    for (std::size_t got = 0; got + 1 < sizeof url;) {
      auto n = ::read(url_pipe[0], url + got, sizeof url - 1 - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    std::_Exit(owner(a, url, quit[0]));
  }
  ::close(url_pipe[0]);
  ::close(quit[0]);
  auto server = must(serve_builtin_metadata("127.0.0.1:0"), "metadata server");
  auto url = server->url();
  if (::write(url_pipe[1], url.data(), url.size()) != static_cast<ssize_t>(url.size())) return 1;
  ::close(url_pipe[1]);
  int rc = reader(a, url);
  ::close(quit[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return rc;
}
