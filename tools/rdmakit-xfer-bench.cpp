// rdmakit-xfer-bench: the transfer engine's throughput and latency, name resolution, and the broadcast chain.
//
//   rdmakit-xfer-bench [--transport shm|tcp|verbs] [--op write|read] [--block 64K] [--batch 16] [--threads 1]
//                      [--connections 2] [--duration 3] [--segment 256M] [--inflight 256]
//                      [--devices D1,D2] [--owner-devices D2,D1] [--peer-timeout-ms 2000] [--prepared]
//                      [--owner-cpu N]
//   rdmakit-xfer-bench --broadcast 1,2,3 [--transport tcp] [--bcast-size 256M] [--chunk 4M]
//   rdmakit-xfer-bench --memcpy [--op write|read] [--block 64K] [--batch 16] [--duration 3] [--segment 256M]
//
// --prepared submits the list Engine::prepare() checked and planned once (the same list every batch).
// --memcpy is the bound of a batch: one thread memcpy()s the same pieces (block bytes at the same rotating
// slots, into and out of buffers of the same footprint as the engine's segment and local memory), in this
// process, with no engine; its row reads "memcpy" in the transport column.
//
// The segment owner runs in a second process (this program with --serve, started and stopped here). Each
// thread submits batches of `batch` requests of `block` bytes at rotating offsets and waits for each; a
// batch's latency is submit to done. Progress every second, then a summary table. The bytes are verified
// after the timed run (a pattern WRITten and READ back). The metadata store: --metadata URL (builtin://,
// redis://, etcd://host:port, see open_metadata), or by default a builtin server this process runs itself.
// --devices: the verbs devices of this side, one rail each (default: the first active device); the owner's
// are --owner-devices (default: the same). Rail i pairs with the owner's rail i, and each batch is striped
// over every rail: two devices on one host (the Soft-RoCE VM's rxe0 and rxe1 on a veth pair) cross the
// wire both ways with --devices rxe0,rxe1 --owner-devices rxe1,rxe0.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "rdmakit/xfer/broadcast.hpp"
#include "rdmakit/xfer/engine.hpp"
#include "rdmakit/xfer/metadata.hpp"

namespace {

using namespace std::chrono_literals;
using namespace rdmakit::xfer;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string transport = "tcp", op = "write", metadata, broadcast, devices, owner_devices;
  std::uint64_t block = 64 << 10, segment = 256 << 20, bcast_size = 256 << 20, chunk = 4 << 20;
  std::uint32_t batch = 16, threads = 1, connections = 2, inflight = 256;
  std::chrono::milliseconds peer_timeout = EngineOptions{}.peer_timeout;
  double duration = 3;
  bool serve = false;
  bool memcpy = false;    // the baseline: one thread copying the same pieces, no engine
  bool prepared = false;  // the request list checked and planned once (Engine::prepare), submitted each batch
  int owner_cpu = -1;     // --owner-cpu: the owner process runs on this CPU only (-1: wherever we may)
};

std::uint64_t parse_size(const std::string& text) {
  std::size_t end = 0;
  auto value = std::stoull(text, &end);
  switch (end < text.size() ? text[end] : ' ') {
    case 'K':
    case 'k':
      return value << 10;
    case 'M':
    case 'm':
      return value << 20;
    case 'G':
    case 'g':
      return value << 30;
    default:
      return value;
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--serve") {
      a.serve = true;
      continue;
    }
    if (flag == "--memcpy") {
      a.memcpy = true;
      continue;
    }
    if (flag == "--prepared") {
      a.prepared = true;
      continue;
    }
    if (i + 1 >= argc) throw std::runtime_error("missing value of " + flag);
    std::string v = argv[++i];
    if (flag == "--transport")
      a.transport = v;
    else if (flag == "--op")
      a.op = v;
    else if (flag == "--block")
      a.block = parse_size(v);
    else if (flag == "--batch")
      a.batch = static_cast<std::uint32_t>(std::stoul(v));
    else if (flag == "--threads")
      a.threads = static_cast<std::uint32_t>(std::stoul(v));
    else if (flag == "--connections")
      a.connections = static_cast<std::uint32_t>(std::stoul(v));
    else if (flag == "--inflight")
      a.inflight = static_cast<std::uint32_t>(std::stoul(v));
    else if (flag == "--duration")
      a.duration = std::stod(v);
    else if (flag == "--segment")
      a.segment = parse_size(v);
    else if (flag == "--metadata")
      a.metadata = v;
    else if (flag == "--broadcast")
      a.broadcast = v;
    else if (flag == "--devices")
      a.devices = v;
    else if (flag == "--owner-devices")
      a.owner_devices = v;
    else if (flag == "--owner-cpu")
      a.owner_cpu = v.find_first_not_of("0123456789") == std::string::npos && !v.empty() && v.size() < 6
                        ? std::stoi(v)
                        : throw std::runtime_error("--owner-cpu '" + v + "' is not a CPU number");
    else if (flag == "--peer-timeout-ms")
      a.peer_timeout = std::chrono::milliseconds(std::stoul(v));
    else if (flag == "--bcast-size")
      a.bcast_size = parse_size(v);
    else if (flag == "--chunk")
      a.chunk = parse_size(v);
    else
      throw std::runtime_error("unknown option " + flag);
  }
  if (a.op != "write" && a.op != "read") throw std::runtime_error("--op is write or read");
  if (a.block == 0 || a.batch == 0 || a.threads == 0)
    throw std::runtime_error("--block, --batch, --threads > 0");
  // Requests go to slots of `block` bytes in turn: a segment of one block makes every request hit the same
  // bytes (the footprint of rdmakit-perf's reused buffer).
  a.segment = std::max(a.segment, a.block);
  if (a.owner_devices.empty()) a.owner_devices = a.devices;
  if (a.owner_cpu >= CPU_SETSIZE || (a.owner_cpu < 0 && a.owner_cpu != -1))
    throw std::runtime_error("--owner-cpu is a CPU number (0 to " + std::to_string(CPU_SETSIZE - 1) + ")");
  // A prepared list is the same every batch: every slot once per batch (segment = block x batch), or one.
  if (a.prepared && (a.threads != 1 || (a.segment != a.block && a.segment != a.block * a.batch)))
    throw std::runtime_error(
        "--prepared needs one thread and --segment equal to --block or --block x --batch");
  if (a.memcpy && (a.serve || !a.broadcast.empty() || a.threads != 1))
    throw std::runtime_error("--memcpy runs alone, on one thread (no --serve, --broadcast or --threads)");
  return a;
}

template <typename T>
T must(rdmakit::Result<T> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().describe());
  return std::move(*r);
}
void must(rdmakit::Result<void> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().describe());
}

std::unique_ptr<MetadataStore> open_store(const Args& a, const char* name_space) {
  return must(open_metadata(a.metadata, {.name_space = name_space}), ("metadata " + a.metadata).c_str());
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= list.size();) {
    auto comma = std::min(list.find(',', start), list.size());
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

int serve(const Args& a) {
  auto metadata = open_store(a, "bench");
  auto engine = must(Engine::create(*metadata, {.name = "bench-owner",
                                                .transports = {a.transport},
                                                .verbs_devices = split(a.owner_devices),
                                                .peer_timeout = a.peer_timeout}),
                     "engine");
  must(engine->allocate_segment("bench", a.segment), "allocate the segment");
  std::cout << "ready" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

// The owner process: this program with --serve.
class Owner {
 public:
  Owner(const Args& a) {
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) throw std::runtime_error("pipe");
    // The path /proc/self/exe names, resolved before the fork: under valgrind the link itself leads to
    // the tool's launcher, while readlink() of it gives this program (the owner then runs natively).
    auto self = std::filesystem::read_symlink("/proc/self/exe").string();
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (a.owner_cpu >= 0) CPU_SET(a.owner_cpu, &cpus);
    pid_ = ::fork();
    if (pid_ == 0) {
      // The placement "the two processes on separate cores": the owner on its CPU, this one where taskset put
      // it.
      if (a.owner_cpu >= 0 && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
        std::perror("rdmakit-xfer-bench: --owner-cpu");
        ::_exit(126);
      }
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);  // else stdin never reaches its end
      ::close(out[0]);
      auto segment = std::to_string(a.segment);
      auto timeout = std::to_string(a.peer_timeout.count());
      ::execl(self.c_str(), "rdmakit-xfer-bench", "--serve", "--transport", a.transport.c_str(), "--metadata",
              a.metadata.c_str(), "--segment", segment.c_str(), "--owner-devices", a.owner_devices.c_str(),
              "--peer-timeout-ms", timeout.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    char line[6] = {};
    if (::read(out[0], line, 6) != 6) throw std::runtime_error("the owner process did not start");
    ::close(out[0]);
  }
  ~Owner() {
    ::close(stdin_);
    ::waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
};

// Page-aligned, zeroed memory: the local buffers of both modes. The segment (allocate_segment) is
// page-aligned and so is rdmakit-perf's buffer; a buffer from the heap starts 16 bytes into a page, which
// made every 64-byte load of a copy into the segment straddle two cache lines (the engine measured 20-30%
// slower than against an aligned buffer, and --memcpy, both sides misaligned alike, did not pay it).
struct PageBuffer {
  explicit PageBuffer(std::size_t size)
      : bytes(static_cast<std::byte*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096))), length(size) {
    if (bytes == nullptr) throw std::runtime_error("out of memory for " + std::to_string(size) + " bytes");
    std::memset(bytes, 0, length);
  }
  ~PageBuffer() { std::free(bytes); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  std::byte* data() const { return bytes; }
  std::size_t size() const { return length; }
  std::byte& operator[](std::size_t i) const { return bytes[i]; }

  std::byte* bytes;
  std::size_t length;
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  auto k = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

struct Shared {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<bool> measuring{false}, stop{false};
  std::mutex mutex;
  std::vector<double> latencies_us;
  std::atomic<std::uint64_t> failed{0};
};

void worker(Engine& engine, SegmentHandle kv, std::byte* local, const Args& a, std::uint32_t t,
            Shared& shared) {
  std::vector<Request> requests(a.batch);
  std::shared_ptr<const PreparedBatch> prepared;  // --prepared: made from the first list
  std::vector<double> mine;
  auto slots = a.segment / a.block;
  std::uint64_t next = t * a.batch;
  while (!shared.stop.load()) {
    for (auto& r : requests) {
      auto slot = next++ % slots;
      r = Request{a.op == "write" ? Op::Write : Op::Read, local + slot * a.block, kv, slot * a.block,
                  a.block};
    }
    next += (a.threads - 1) * a.batch;  // threads take turns over the slots
    if (a.prepared && !prepared) prepared = must(engine.prepare(requests), "prepare");
    auto start = Clock::now();
    auto batch = must(prepared ? engine.submit(*prepared) : engine.submit(requests), "submit");
    must(batch->wait(60s), "wait");
    auto us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (batch->failed() != 0) shared.failed += batch->failed();
    if (shared.measuring.load()) {
      shared.bytes += std::uint64_t{a.batch} * a.block;
      mine.push_back(us);
    }
  }
  std::lock_guard lock(shared.mutex);
  shared.latencies_us.insert(shared.latencies_us.end(), mine.begin(), mine.end());
}

// WRITEs a pattern over the first batch * block bytes and READs it back into another buffer.
bool verify(Engine& engine, SegmentHandle kv, std::byte* local, std::byte* back, const Args& a) {
  auto size = std::min<std::uint64_t>(a.segment / a.block, a.batch) * a.block;
  for (std::uint64_t i = 0; i < size; ++i) local[i] = std::byte(static_cast<std::uint8_t>(i * 7 + 3));
  std::memset(back, 0, size);
  std::vector<Request> writes, reads;
  for (std::uint64_t off = 0; off < size; off += a.block) {
    writes.push_back({Op::Write, local + off, kv, off, a.block});
    reads.push_back({Op::Read, back + off, kv, off, a.block});
  }
  auto w = must(engine.submit(writes), "verify write");
  must(w->wait(60s), "verify write");
  auto r = must(engine.submit(reads), "verify read");
  must(r->wait(60s), "verify read");
  return w->failed() + r->failed() == 0 && std::memcmp(local, back, size) == 0;
}

int run(Args a) {
  Owner owner(a);
  auto metadata = open_store(a, "bench");
  auto engine = must(Engine::create(*metadata, {.name = "bench-client",
                                                .transports = {a.transport},
                                                .verbs_devices = split(a.devices),
                                                .connections_per_rail = a.connections,
                                                .max_inflight_per_peer = a.inflight,
                                                .max_inflight_per_rail = std::max(1024u, a.inflight),
                                                .peer_timeout = a.peer_timeout}),
                     "engine");
  PageBuffer local(a.segment), back(a.segment);
  must(engine->register_local(local.data(), local.size()), "register");
  must(engine->register_local(back.data(), back.size()), "register");

  auto t0 = Clock::now();
  auto kv = must(engine->open_segment("bench"), "open_segment");
  auto first_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  auto t1 = Clock::now();
  constexpr int kCached = 10000;
  for (int i = 0; i < kCached; ++i) must(engine->open_segment("bench"), "open_segment");
  auto cached_ns = std::chrono::duration<double, std::nano>(Clock::now() - t1).count() / kCached;
  auto transport = must(engine->segment_info(kv), "info").transport;

  Shared shared;
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < a.threads; ++t) {
    threads.emplace_back(worker, std::ref(*engine), kv, local.data(), std::cref(a), t, std::ref(shared));
  }
  std::this_thread::sleep_for(500ms);  // warm-up: connections, pages, caches
  auto trips_before = metadata->round_trips();
  auto wrs_before = engine->stats().work_requests;
  auto requests_before = engine->stats().requests;
  shared.measuring = true;
  auto start = Clock::now();
  std::uint64_t last = 0;
  for (int s = 1; s <= static_cast<int>(a.duration); ++s) {
    std::this_thread::sleep_until(start + std::chrono::seconds(s));
    auto now = shared.bytes.load();
    std::fprintf(stderr, "  %2d s  %8.3f GB/s\n", s, (now - last) / 1e9);
    last = now;
  }
  std::this_thread::sleep_until(start + std::chrono::duration<double>(a.duration));
  shared.measuring = false;
  auto seconds = std::chrono::duration<double>(Clock::now() - start).count();
  shared.stop = true;
  for (auto& t : threads) t.join();
  auto trips = metadata->round_trips() - trips_before;
  auto stats = engine->stats();
  double wr_per_request =
      double(stats.work_requests - wrs_before) / std::max<double>(1, stats.requests - requests_before);
  bool ok = verify(*engine, kv, local.data(), back.data(), a) && shared.failed == 0;

  auto& lat = shared.latencies_us;
  std::printf(
      "| transport | op | block | batch | threads | conns | GB/s | batches/s | p50 us | p99 us | p999 us | "
      "WR/req "
      "| metadata trips (data path) | verified "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %s | %llu | %u | %u | %u | %.3f | %.0f | %.1f | %.1f | %.1f | %.3f | %llu | %s |\n",
              transport.c_str(), a.op.c_str(), (unsigned long long)a.block, a.batch, a.threads, a.connections,
              shared.bytes / seconds / 1e9, lat.size() / seconds, percentile(lat, 0.5), percentile(lat, 0.99),
              percentile(lat, 0.999), wr_per_request, (unsigned long long)trips, ok ? "yes" : "NO");
  std::printf(
      "name resolution: first %.1f us (lookup + connect), cached %.1f ns; metadata round trips in the timed "
      "run: %llu\n",
      first_us, cached_ns, (unsigned long long)trips);
  return ok ? 0 : 1;
}

// The bound of a batch: one thread copying the pieces the engine's worker would submit, between buffers
// of the same footprint (the local memory and the segment), timed the same way.
int run_memcpy(const Args& a) {
  PageBuffer local(a.segment), remote(a.segment);
  std::memset(local.data(), 1, local.size());
  std::memset(remote.data(), 2, remote.size());
  const auto slots = a.segment / a.block;
  const bool write = a.op == "write";
  std::uint64_t next = 0, bytes = 0;
  std::vector<double> latencies;
  auto copy_batch = [&] {
    for (std::uint32_t i = 0; i < a.batch; ++i) {
      auto at = (next++ % slots) * a.block;
      if (write)
        std::memcpy(remote.data() + at, local.data() + at, a.block);
      else
        std::memcpy(local.data() + at, remote.data() + at, a.block);
    }
  };
  for (auto warm = Clock::now() + 500ms; Clock::now() < warm;) copy_batch();
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.duration));
  while (Clock::now() < end) {
    auto t = Clock::now();
    copy_batch();
    latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    bytes += std::uint64_t{a.batch} * a.block;
  }
  auto seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // The copies must not be optimized away: a byte of the destination is reported.
  volatile auto sink = (write ? remote : local)[0];
  (void)sink;
  std::printf(
      "| transport | op | block | batch | threads | conns | GB/s | batches/s | p50 us | p99 us | p999 us | "
      "WR/req | metadata trips (data path) | verified "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| memcpy | %s | %llu | %u | 1 | 0 | %.3f | %.0f | %.1f | %.1f | %.1f | 0 | 0 | n/a |\n",
              a.op.c_str(), (unsigned long long)a.block, a.batch, bytes / seconds / 1e9,
              latencies.size() / seconds, percentile(latencies, 0.5), percentile(latencies, 0.99),
              percentile(latencies, 0.999));
  return 0;
}

// One broadcast to n receivers, every node a thread with its own context; end to end: from the sender's
// chain being connected to the last receiver done.
double broadcast_once(const Args& a, std::uint32_t n, int round) {
  BroadcastOptions options{.session = "b" + std::to_string(n) + "-" + std::to_string(round),
                           .receivers = n,
                           .size = a.bcast_size,
                           .chunk_bytes = a.chunk};
  auto store = open_store(a, "bench-bcast");
  auto& metadata = *store;
  std::vector<Clock::time_point> finished(n + 1);
  std::vector<std::thread> nodes;
  std::atomic<int> failures{0};
  Clock::time_point sender_start;
  auto node = [&](std::uint32_t r) {
    auto ctx = must(rdmakit::Context::open({.transport = a.transport, .name = "bcast-" + std::to_string(r)}),
                    "open");
    auto region = must(
        ctx->allocate(a.bcast_size, rdmakit::Access::LocalWrite | rdmakit::Access::RemoteWrite), "alloc");
    std::memset(region->data(), r == 0 ? 0x5a : 0, a.bcast_size);
    auto result = r == 0 ? broadcast_send(*ctx, metadata, *region, options)
                         : broadcast_receive(*ctx, metadata, *region, r, options);
    finished[r] = Clock::now();
    if (!result) {
      std::fprintf(stderr, "node %u: %s\n", r, result.error().describe().c_str());
      ++failures;
      return;
    }
    if (r == 0) sender_start = finished[0] - result->elapsed;
    auto* bytes = static_cast<const unsigned char*>(region->data());
    if (r != 0 && (bytes[0] != 0x5a || bytes[a.bcast_size - 1] != 0x5a ||
                   std::memcmp(bytes, bytes + 1, a.bcast_size - 1) != 0)) {
      ++failures;
    }
  };
  for (std::uint32_t r = 0; r <= n; ++r) {
    // An exception must not leave its thread (std::terminate): a node that cannot open its context or
    // allocate says why and counts as a failure, and the others end by the broadcast's own timeout.
    nodes.emplace_back([&, r] {
      try {
        node(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "node %u: %s\n", r, e.what());
        ++failures;
      }
    });
  }
  for (auto& t : nodes) t.join();
  if (failures != 0) throw std::runtime_error("broadcast failed or delivered wrong bytes");
  auto last = *std::max_element(finished.begin() + 1, finished.end());
  return std::chrono::duration<double, std::milli>(last - sender_start).count();
}

int broadcast(const Args& a) {
  std::vector<std::uint32_t> counts;
  std::stringstream list(a.broadcast);
  for (std::string item; std::getline(list, item, ',');)
    counts.push_back(static_cast<std::uint32_t>(std::stoul(item)));
  std::printf(
      "| receivers | runs (ms) | median ms | GB/s per receiver | vs 1 receiver |\n|---|---|---|---|---|\n");
  double base = 0;
  for (int round = 0; auto n : counts) {
    std::vector<double> ms;
    for (int rep = 0; rep < 3; ++rep) ms.push_back(broadcast_once(a, n, round++));
    auto runs = std::to_string(ms[0]).substr(0, 6) + ", " + std::to_string(ms[1]).substr(0, 6) + ", " +
                std::to_string(ms[2]).substr(0, 6);
    std::sort(ms.begin(), ms.end());
    if (base == 0) base = ms[1];
    std::printf("| %u | %s | %.1f | %.2f | %.2fx |\n", n, runs.c_str(), ms[1], a.bcast_size / ms[1] / 1e6,
                ms[1] / base);
    std::fflush(stdout);
  }
  // broadcast_once() threw unless every receiver of every run got the sender's bytes.
  std::printf("broadcast: every receiver's bytes checked in every run\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto a = parse(argc, argv);
    if (a.memcpy) return run_memcpy(a);
    // No store given: this process serves a builtin one (the --serve child gets its URL).
    std::unique_ptr<MetadataServer> server;
    if (a.metadata.empty()) {
      if (a.serve) throw std::runtime_error("--serve needs --metadata URL");
      server = must(serve_builtin_metadata("127.0.0.1:0"), "serve the builtin metadata");
      a.metadata = server->url();
    }
    return a.serve ? serve(a) : !a.broadcast.empty() ? broadcast(a) : run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmakit-xfer-bench: %s\n", e.what());
    return 1;
  }
}
