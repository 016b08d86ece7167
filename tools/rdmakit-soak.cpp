// rdmakit-soak: a long run of mixed operations with every byte checked and resource counts watched.
//   rdmakit-soak [-n ops] [-c connections] [--transport tcp|shm|verbs] [--seed s] [-w window] [--phases p]
//                [--listen host:port] [--target-device D] [--initiator-device D] [--no-atomics]
// --listen: the target's listen address (default: the listen_address option); --target-device and
// --initiator-device: each context's verbs device (default: the device option). With two devices on one
// host (the Soft-RoCE VM's rxe0 and rxe1 on a veth pair), the traffic then crosses the wire.
// --no-atomics: WRITE, WRITE with immediate, READ and SEND only, in the same proportions to each other (for
// a device whose atomics are known to misbehave under faults: rxe under netem, docs/reliability.md).
// A target context and an initiator context in this process, joined by `-c` connections. The initiator
// keeps `-w` operations in flight, each on a random connection: WRITE, WRITE with immediate, READ, SEND
// (into a receive the target posts just before), fetch_add and compare_swap on a few counters that every
// connection shares. Sizes run from 0 B to 1 MiB, mostly small. Every operation owns a slot of the source
// and target buffers while in flight, filled with a pattern unique to the operation, so a stale, partial
// or misplaced transfer shows up when the slot is compared. At the end the counters must hold exactly the
// sum of the adds and the number of successful swaps.
// The run is split into phases; between phases the pipeline drains, a few connections are closed and
// opened again and a scratch region is registered and dropped, so that leaks of fds, threads, mappings or
// memory show up in the counts taken after the first phase (warm-up) and at the end. Growth beyond the
// tolerances printed at the start fails the run (exit 1), as does any wrong byte or failed completion.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/context.hpp"

namespace {

using namespace rdmakit;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint32_t kMaxSize = 1 << 20;
// Slots of the window: a few hold up to 1 MiB, the rest up to 64 KiB (which almost all operations fit), so
// that a deep window costs tens of MiB rather than a MiB per slot.
constexpr std::uint32_t kSmallSize = 64 << 10;
constexpr std::uint32_t kBigSlots = 16;
constexpr std::size_t kCounters = 8;         // fetch_add counters, then as many compare_swap counters
constexpr std::uint32_t kChurnPerPhase = 4;  // connections closed and reopened between phases
// Tolerated growth from the end of the warm-up phase to the end of the run. The resident size checked is
// the anonymous part (heap, stacks): shared memory grows for a while without leaking, as the shm
// transport's per-connection receive rings are touched slot by slot until they wrap; a leaked shared
// region would show up in the mappings and fds instead.
// Under AddressSanitizer the resident size is not checked: its quarantine keeps freed memory (up to 256 MiB)
// resident on purpose, and LeakSanitizer looks for leaks there instead.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCheckRss = false;
#else
constexpr bool kCheckRss = true;
#endif
constexpr long kRssSlackKiB = 32 * 1024;
constexpr long kFdSlack = 0;
constexpr long kThreadSlack = 0;
constexpr long kMappingSlack = 16;
constexpr auto kStallLimit = 120s;  // no completion at all for this long: the run hangs

struct Args {
  std::uint64_t ops = 100000;
  std::uint32_t connections = 256;
  std::uint32_t window = 256;  // deep enough that tcp's engine batches
  std::uint32_t phases = 10;
  std::uint64_t seed = 1;
  std::string transport = "tcp";
  std::string listen{}, target_device{}, initiator_device{};  // empty: the options' (environment) default
  // A defect planted on purpose, to show that the checks catch it (tests/reliability): "corrupt" flips a
  // byte a WRITE landed, "atomic" adds to a counter behind the initiator's back, "leak" keeps every
  // connection it should close and every scratch region it should drop (fds and registrations grow).
  std::string inject{};
  bool atomics = true;  // --no-atomics: false
};

[[noreturn]] void die(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "rdmakit-soak: FAIL: %s\n", message.c_str());
  std::exit(1);
}

template <typename T>
T must(Result<T> result, const char* what) {
  if (!result) die(std::string(what) + ": " + result.error().describe());
  return std::move(*result);
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--no-atomics") {
      a.atomics = false;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (k == "-n")
      a.ops = std::strtoull(v, nullptr, 10);
    else if (k == "-c")
      a.connections = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "-w")
      a.window = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "--phases")
      a.phases = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "--seed")
      a.seed = std::strtoull(v, nullptr, 10);
    else if (k == "--transport")
      a.transport = v;
    else if (k == "--inject")
      a.inject = v;
    else if (k == "--listen")
      a.listen = v;
    else if (k == "--target-device")
      a.target_device = v;
    else if (k == "--initiator-device")
      a.initiator_device = v;
    else
      return false;
  }
  if (!a.inject.empty() && a.inject != "corrupt" && a.inject != "atomic" && a.inject != "leak") return false;
  return a.ops > 0 && a.connections > kChurnPerPhase && a.window > 0 && a.window <= 1024 && a.phases >= 2;
}

// ---- resource counts (/proc) ----

struct Resources {
  long rss_kib = 0, anon_kib = 0, shmem_kib = 0, fds = 0, threads = 0, mappings = 0, registrations = 0;
};

long count_dir(const char* path) {
  long n = 0;
  if (DIR* d = opendir(path)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n - 1;  // opendir's own fd (for /proc/self/fd); harmless elsewhere as only growth is compared
}

long status_field(const std::string& name) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0) return std::strtol(line.c_str() + name.size() + 1, nullptr, 10);
  return -1;
}

Resources measure(const Context& target, const Context& initiator) {
  Resources r;
  r.rss_kib = status_field("VmRSS");
  r.anon_kib = status_field("RssAnon");
  r.shmem_kib = status_field("RssShmem");
  r.threads = status_field("Threads");
  r.fds = count_dir("/proc/self/fd");
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++r.mappings;
  // Live registrations of both contexts (tcp, shm: their registration tables; verbs: its cache).
  r.registrations = static_cast<long>(target.live_registrations() + initiator.live_registrations());
  return r;
}

// What grew from `warm` to `now` by more than its tolerance, or "" when nothing did.
std::string growth_beyond_tolerance(const Resources& warm, const Resources& now) {
  std::string growth;
  auto check = [&](const char* what, long before, long after, long slack) {
    if (after - before > slack)
      growth += std::string(growth.empty() ? "" : "; ") + what + " grew from " + std::to_string(before) +
                " to " + std::to_string(after) + " (tolerance " + std::to_string(slack) + ")";
  };
  if (kCheckRss) check("anonymous rss KiB", warm.anon_kib, now.anon_kib, kRssSlackKiB);
  check("fds", warm.fds, now.fds, kFdSlack);
  check("threads", warm.threads, now.threads, kThreadSlack);
  check("mappings", warm.mappings, now.mappings, kMappingSlack);
  check("registrations", warm.registrations, now.registrations, 0);
  return growth;
}

void print(const char* when, const Resources& r) {
  std::printf(
      "%-8s rss %ld KiB (anon %ld, shmem %ld), fds %ld, threads %ld, mappings %ld, registrations %ld\n", when,
      r.rss_kib, r.anon_kib, r.shmem_kib, r.fds, r.threads, r.mappings, r.registrations);
}

// ---- patterns ----

// Word i of operation `tag`'s bytes. A different tag differs in every word, so stale bytes never pass.
inline std::uint64_t pattern_word(std::uint64_t tag, std::uint64_t i) {
  return (tag * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull) ^ (i >> 3);
}

void fill(std::byte* p, std::uint32_t size, std::uint64_t tag) {
  std::uint32_t words = size / 8;
  for (std::uint32_t i = 0; i < words; ++i) {
    std::uint64_t w = pattern_word(tag, i);
    std::memcpy(p + 8 * i, &w, 8);
  }
  std::uint64_t w = pattern_word(tag, words);
  std::memcpy(p + 8 * words, &w, size % 8);
}

// ---- the run ----

enum class Kind : std::uint8_t { Write, WriteImm, Read, Send, FetchAdd, CompareSwap };
constexpr const char* kKindNames[] = {"write", "write_imm", "read", "send", "fetch_add", "compare_swap"};

struct Slot {
  bool busy = false;
  Kind kind{};
  std::uint64_t tag = 0;
  std::uint32_t size = 0;
  std::uint32_t connection = 0;  // index into the pairs
  std::uint64_t send_id = 0, recv_id = 0;
  bool send_done = false, recv_done = true;
  std::uint32_t counter = 0;
  std::uint64_t operand = 0;  // addend, or expected value of a compare_swap
  std::uint32_t recv_bytes = 0;
  std::uint32_t imm = 0;
  bool recv_has_imm = false;
};

struct Pair {
  std::shared_ptr<Connection> initiator, target;
};

class Soak {
 public:
  explicit Soak(const Args& args) : args_(args), rng_(args.seed) {}

  int run();

 private:
  void open_contexts();
  void connect_all();
  void reconnect(std::uint32_t index);
  Pair make_pair();
  void issue();
  void issue_on(std::uint32_t slot_index);
  void drain_completions(bool block);
  void on_completion(const Completion& c, bool target_side);
  void finish(std::uint32_t slot_index);
  void verify_slot(Slot& s, std::uint32_t slot_index);
  void drain_all();
  void churn();
  Resources settled_measure(const Resources& warm);
  void check_counters();
  std::uint32_t pick_size();
  std::uint32_t big_slots() const { return std::min(args_.window, kBigSlots); }
  std::uint64_t offset_of(std::uint32_t slot) const {
    if (slot < big_slots()) return std::uint64_t{slot} * kMaxSize;
    return std::uint64_t{big_slots()} * kMaxSize + std::uint64_t{slot - big_slots()} * kSmallSize;
  }
  std::byte* src(std::uint32_t slot) { return static_cast<std::byte*>(source_->data()) + offset_of(slot); }
  std::byte* dst(std::uint32_t slot) { return static_cast<std::byte*>(sink_->data()) + offset_of(slot); }
  bool take_slot(std::uint32_t size, std::uint32_t& slot);
  std::uint64_t* counters() { return static_cast<std::uint64_t*>(counters_->data()); }

  Args args_;
  std::mt19937_64 rng_;
  std::shared_ptr<Context> target_ctx_, initiator_ctx_;
  std::shared_ptr<Listener> listener_;
  std::shared_ptr<CompletionQueue> init_send_cq_, init_recv_cq_, target_send_cq_, target_recv_cq_;
  std::shared_ptr<MemoryRegion> source_;    // initiator: WRITE/SEND sources, READ and atomic results
  std::shared_ptr<MemoryRegion> sink_;      // target: WRITE destinations, READ sources, receive buffers
  std::shared_ptr<MemoryRegion> counters_;  // target: the shared atomic counters
  std::vector<Pair> pairs_;
  std::vector<Pair> leaked_;                                   // --inject leak
  std::vector<std::shared_ptr<MemoryRegion>> leaked_regions_;  // --inject leak
  bool corrupted_ = false;                                     // --inject corrupt: done
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_big_, free_small_;
  // The next operation's kind, connection and size, drawn before a slot is free for it so that the sequence
  // of operations depends on the seed alone, not on the order in which completions arrive.
  struct Next {
    Kind kind{};
    std::uint32_t connection = 0, size = 0;
  };
  std::optional<Next> next_;
  std::vector<std::uint64_t> added_;        // per fetch_add counter: sum of completed addends
  std::vector<std::uint64_t> issued_adds_;  // per fetch_add counter: sum of issued addends
  std::vector<std::uint64_t> swapped_;      // per compare_swap counter: successful swaps
  std::vector<std::uint64_t> cas_guess_;    // per compare_swap counter: the last value seen
  std::uint64_t phase_end_ = 0;             // operations issued by the end of the current phase
  std::uint64_t issued_ = 0, completed_ = 0, next_tag_ = 1;
  std::uint64_t bytes_verified_ = 0, reconnects_ = 0;
  std::uint64_t per_kind_[6] = {};
  Clock::time_point last_progress_ = Clock::now();
};

void Soak::open_contexts() {
  Options options;
  options.transport = args_.transport;
  options.name = "soak-target";
  if (!args_.target_device.empty()) options.set("device", args_.target_device);
  target_ctx_ = must(Context::open(options), "open the target context");
  options.name = "soak-initiator";
  options.named.erase("device");
  if (!args_.initiator_device.empty()) options.set("device", args_.initiator_device);
  initiator_ctx_ = must(Context::open(options), "open the initiator context");
  // The shared queues hold at most what is in flight: one send completion per slot on the initiator,
  // one receive per slot on the target (with margin for the churned connections' flushes).
  std::size_t depth = 2 * args_.window + 64;
  init_send_cq_ = must(initiator_ctx_->create_cq(depth), "create the initiator's send queue");
  init_recv_cq_ = must(initiator_ctx_->create_cq(depth), "create the initiator's receive queue");
  target_send_cq_ = must(target_ctx_->create_cq(depth), "create the target's send queue");
  target_recv_cq_ = must(target_ctx_->create_cq(depth), "create the target's receive queue");
  std::size_t bytes = offset_of(args_.window);
  source_ = must(initiator_ctx_->allocate(bytes, Access::LocalWrite), "allocate the source buffers");
  sink_ = must(target_ctx_->allocate(bytes, Access::All), "allocate the target buffers");
  counters_ = must(target_ctx_->allocate(4096, Access::All), "allocate the counters");
  listener_ = must(target_ctx_->listen(args_.listen), "listen");  // empty: the listen_address option
  // Touch every page now, so that the resident size after warm-up is the run's steady state.
  std::memset(source_->data(), 0, source_->size());
  std::memset(sink_->data(), 0, sink_->size());
}

Pair Soak::make_pair() {
  std::optional<Result<std::shared_ptr<Connection>>> accepted;
  std::thread acceptor([&] {
    accepted = listener_->accept(60s, ConnectOptions{.send_cq = target_send_cq_, .recv_cq = target_recv_cq_});
  });
  auto connected = initiator_ctx_->connect(
      listener_->address(), ConnectOptions{.send_cq = init_send_cq_, .recv_cq = init_recv_cq_});
  acceptor.join();
  Pair pair;
  pair.initiator = must(std::move(connected), "connect");
  pair.target = must(std::move(*accepted), "accept");
  return pair;
}

void Soak::connect_all() {
  for (std::uint32_t i = 0; i < args_.connections; ++i) pairs_.push_back(make_pair());
}

void Soak::reconnect(std::uint32_t index) {
  if (args_.inject == "leak") {
    leaked_.push_back(pairs_[index]);
  } else {
    pairs_[index].initiator->close();
    pairs_[index].target->close();
  }
  pairs_[index] = {};
  // Closing flushes nothing here (the pipeline is drained), but take whatever a transport reports.
  drain_completions(false);
  pairs_[index] = make_pair();
  ++reconnects_;
}

std::uint32_t Soak::pick_size() {
  std::uint32_t bucket = static_cast<std::uint32_t>(rng_() % 1000);
  auto in = [&](std::uint32_t lo, std::uint32_t hi) {
    return lo + static_cast<std::uint32_t>(rng_() % (hi - lo + 1));
  };
  if (bucket < 20) return 0;
  if (bucket < 700) return in(1, 256);
  if (bucket < 940) return in(257, 4096);
  if (bucket < 998) return in(4097, 65536);
  return in(65537, kMaxSize);
}

bool Soak::take_slot(std::uint32_t size, std::uint32_t& slot) {
  auto& pool = size > kSmallSize || free_small_.empty() ? free_big_ : free_small_;
  if (pool.empty()) return false;
  slot = pool.back();
  pool.pop_back();
  return true;
}

void Soak::issue() {
  while (issued_ < phase_end_) {
    if (!next_) {
      Next n;
      n.connection = static_cast<std::uint32_t>(rng_() % pairs_.size());
      std::uint32_t r = static_cast<std::uint32_t>(rng_() % (args_.atomics ? 100 : 80));
      n.kind = r < 30   ? Kind::Write
               : r < 45 ? Kind::WriteImm
               : r < 65 ? Kind::Read
               : r < 80 ? Kind::Send
               : r < 92 ? Kind::FetchAdd
                        : Kind::CompareSwap;
      n.size = n.kind == Kind::FetchAdd || n.kind == Kind::CompareSwap ? 8 : pick_size();
      next_ = n;
    }
    std::uint32_t slot = 0;
    if (!take_slot(next_->size, slot)) return;
    issue_on(slot);
    next_.reset();
    ++issued_;
  }
}

void Soak::issue_on(std::uint32_t index) {
  Slot& s = slots_[index];
  s = Slot{};
  s.busy = true;
  s.tag = next_tag_++;
  s.connection = next_->connection;
  s.kind = next_->kind;
  s.size = next_->size;
  ++per_kind_[static_cast<int>(s.kind)];
  Pair& p = pairs_[s.connection];
  RemoteRegion sink = sink_->descriptor();
  std::uint64_t offset = offset_of(index);
  switch (s.kind) {
    case Kind::Write:
    case Kind::WriteImm:
      fill(src(index), s.size, s.tag);
      if (s.kind == Kind::WriteImm) {
        s.recv_id = must(p.target->post_recv(std::span<const Segment>{}), "post a receive for write_imm");
        s.recv_done = false;
        s.imm = static_cast<std::uint32_t>(s.tag);
        s.send_id =
            must(p.initiator->write_imm(source_->slice(offset, s.size), sink.at(offset), s.imm), "write_imm");
      } else {
        s.send_id = must(p.initiator->write(source_->slice(offset, s.size), sink.at(offset)), "write");
      }
      break;
    case Kind::Read:
      fill(dst(index), s.size, s.tag);
      s.send_id = must(p.initiator->read(source_->slice(offset, s.size), sink.at(offset)), "read");
      break;
    case Kind::Send:
      fill(src(index), s.size, s.tag);
      s.recv_id = must(p.target->post_recv(sink_->slice(offset, s.size)), "post a receive");
      s.recv_done = false;
      s.send_id = must(p.initiator->send(source_->slice(offset, s.size)), "send");
      break;
    case Kind::FetchAdd:
      s.counter = static_cast<std::uint32_t>(rng_() % kCounters);
      s.operand = 1 + rng_() % 1000;
      issued_adds_[s.counter] += s.operand;
      s.send_id = must(p.initiator->fetch_add(source_->slice(offset, 8),
                                              counters_->descriptor().at(8 * s.counter), s.operand),
                       "fetch_add");
      break;
    case Kind::CompareSwap:
      s.counter = static_cast<std::uint32_t>(rng_() % kCounters);
      s.operand = cas_guess_[s.counter];
      s.send_id = must(p.initiator->compare_swap(source_->slice(offset, 8),
                                                 counters_->descriptor().at(8 * (kCounters + s.counter)),
                                                 s.operand, s.operand + 1),
                       "compare_swap");
      break;
  }
}

void Soak::on_completion(const Completion& c, bool target_side) {
  // The slot is found by id: slots are few (the window), and this keeps the ids opaque.
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.busy) continue;
    bool mine = target_side ? (!s.recv_done && s.recv_id == c.id) : (!s.send_done && s.send_id == c.id);
    if (!mine) continue;
    if (!c.ok())
      die(std::string(kKindNames[static_cast<int>(s.kind)]) + " of " + std::to_string(s.size) +
          " bytes on connection " + std::to_string(s.connection) + (target_side ? " (its receive)" : "") +
          " completed " + std::string(to_string(c.status)));
    if (target_side) {
      s.recv_done = true;
      s.recv_bytes = c.bytes;
      s.recv_has_imm = c.has_imm;
      if (c.has_imm) s.imm = c.imm;
    } else {
      s.send_done = true;
    }
    if (s.send_done && s.recv_done) finish(i);
    return;
  }
  die("a completion with id " + std::to_string(c.id) + " that no operation in flight has");
}

void Soak::verify_slot(Slot& s, std::uint32_t index) {
  auto mismatch = [&](const std::byte* got, const std::byte* want) {
    if (std::memcmp(got, want, s.size) == 0) return;
    std::uint32_t at = 0;
    while (got[at] == want[at]) ++at;
    die(std::string(kKindNames[static_cast<int>(s.kind)]) + " #" + std::to_string(s.tag) + " of " +
        std::to_string(s.size) + " bytes on connection " + std::to_string(s.connection) + ": byte " +
        std::to_string(at) + " is wrong");
  };
  switch (s.kind) {
    case Kind::Write:
    case Kind::Send:
    case Kind::WriteImm:
      // The source still holds the unique pattern; the target slot must now equal it.
      if (args_.inject == "corrupt" && !corrupted_ && s.tag >= 1000 && s.size > 0) {
        dst(index)[s.size - 1] ^= std::byte{1};
        corrupted_ = true;
      }
      mismatch(dst(index), src(index));
      if (s.kind != Kind::Write) {
        if (s.recv_bytes != s.size)
          die("receive of " + std::string(kKindNames[static_cast<int>(s.kind)]) + " #" +
              std::to_string(s.tag) + " reported " + std::to_string(s.recv_bytes) + " bytes, " +
              std::to_string(s.size) + " were sent");
        if (s.kind == Kind::WriteImm && (!s.recv_has_imm || s.imm != static_cast<std::uint32_t>(s.tag)))
          die("write_imm #" + std::to_string(s.tag) + " arrived with a wrong immediate");
      }
      break;
    case Kind::Read:
      mismatch(src(index), dst(index));
      break;
    case Kind::FetchAdd: {
      std::uint64_t old = 0;
      std::memcpy(&old, src(index), 8);
      if (old + s.operand > issued_adds_[s.counter])
        die("fetch_add returned " + std::to_string(old) + ", beyond what the adds issued so far can make");
      added_[s.counter] += s.operand;
      break;
    }
    case Kind::CompareSwap: {
      std::uint64_t old = 0;
      std::memcpy(&old, src(index), 8);
      if (old == s.operand) ++swapped_[s.counter];
      cas_guess_[s.counter] = std::max(cas_guess_[s.counter], old == s.operand ? old + 1 : old);
      break;
    }
  }
  bytes_verified_ += s.size;
}

void Soak::finish(std::uint32_t index) {
  verify_slot(slots_[index], index);
  slots_[index].busy = false;
  (index < big_slots() ? free_big_ : free_small_).push_back(index);
  ++completed_;
  last_progress_ = Clock::now();
}

void Soak::drain_completions(bool block) {
  Completion batch[64];
  std::size_t got = init_send_cq_->poll(batch);
  for (std::size_t i = 0; i < got; ++i) on_completion(batch[i], false);
  std::size_t got_recv = target_recv_cq_->poll(batch);
  for (std::size_t i = 0; i < got_recv; ++i) on_completion(batch[i], true);
  if (got + got_recv > 0 || !block) return;
  for (auto* cq : {init_send_cq_.get(), target_recv_cq_.get()})
    if (auto h = cq->health(); !h) die("completion queue: " + h.error().describe());
  if (Clock::now() - last_progress_ > kStallLimit)
    die("no operation completed for " + std::to_string(kStallLimit.count()) + " s with " +
        std::to_string(issued_ - completed_) + " in flight: the run hangs");
  auto waited = init_send_cq_->wait(std::span<Completion>(batch), 1ms);
  if (!waited) die("wait: " + waited.error().describe());
  for (std::size_t i = 0; i < *waited; ++i) on_completion(batch[i], false);
}

void Soak::drain_all() {
  while (completed_ < issued_) drain_completions(true);
  // Nothing is ever posted where these two complete; anything there is a bug. (Checked here, not per
  // completion: a poll makes the transport walk its connections, so idle queues are polled rarely.)
  Completion batch[8];
  if (init_recv_cq_->poll(batch) + target_send_cq_->poll(batch) != 0)
    die("a completion on a queue nothing uses");
}

// The end count, given up to 2 s to come back to the warm-up's. A thread that pthread_join already
// returned for is still counted in /proc/self/status until the kernel reaps it (the join wakes when the
// thread clears its tid, before it leaves the thread group): under emulation CI caught the churn's
// acceptor thread there ("threads grew from 3 to 4"). A real leak stays and still fails.
Resources Soak::settled_measure(const Resources& warm) {
  auto give_up = Clock::now() + 2s;
  Resources now = measure(*target_ctx_, *initiator_ctx_);
  while (!growth_beyond_tolerance(warm, now).empty() && Clock::now() < give_up) {
    std::this_thread::sleep_for(20ms);
    now = measure(*target_ctx_, *initiator_ctx_);
  }
  return now;
}

void Soak::churn() {
  for (std::uint32_t k = 0; k < kChurnPerPhase; ++k)
    reconnect(static_cast<std::uint32_t>(rng_() % pairs_.size()));
  // A scratch registration used once and dropped: a leaked registration grows the counts.
  auto scratch = must(target_ctx_->allocate(1 << 16, Access::All), "allocate a scratch region");
  std::uint32_t slot = 0;
  fill(src(slot), 1 << 16, next_tag_);
  auto id = must(pairs_[0].initiator->write(source_->slice(0, 1 << 16), scratch->descriptor().at(0)),
                 "scratch write");
  auto c = must(init_send_cq_->wait_for(id, 60s), "scratch write completion");
  if (!c.ok() || std::memcmp(scratch->data(), src(slot), 1 << 16) != 0)
    die("the scratch region's write did not land");
  bytes_verified_ += 1 << 16;
  if (args_.inject == "leak") leaked_regions_.push_back(scratch);
}

void Soak::check_counters() {
  if (args_.inject == "atomic" && completed_ == args_.ops)
    __atomic_fetch_add(&counters()[kCounters - 1], 1, __ATOMIC_SEQ_CST);
  for (std::size_t i = 0; i < kCounters; ++i) {
    std::uint64_t add = __atomic_load_n(&counters()[i], __ATOMIC_SEQ_CST);
    std::uint64_t cas = __atomic_load_n(&counters()[kCounters + i], __ATOMIC_SEQ_CST);
    if (add != added_[i])
      die("fetch_add counter " + std::to_string(i) + " holds " + std::to_string(add) + ", expected " +
          std::to_string(added_[i]));
    if (cas != swapped_[i])
      die("compare_swap counter " + std::to_string(i) + " holds " + std::to_string(cas) + ", expected " +
          std::to_string(swapped_[i]) + " (successful swaps)");
  }
}

int Soak::run() {
  auto start = Clock::now();
  open_contexts();
  Resources at_start = measure(*target_ctx_, *initiator_ctx_);
  connect_all();
  slots_.resize(args_.window);
  for (std::uint32_t i = args_.window; i-- > 0;) (i < big_slots() ? free_big_ : free_small_).push_back(i);
  added_.assign(kCounters, 0);
  issued_adds_.assign(kCounters, 0);
  swapped_.assign(kCounters, 0);
  cas_guess_.assign(kCounters, 0);
  std::printf("rdmakit-soak: %s, %llu ops, %u connections, window %u, %u phases, seed %llu%s\n",
              args_.transport.c_str(), static_cast<unsigned long long>(args_.ops), args_.connections,
              args_.window, args_.phases, static_cast<unsigned long long>(args_.seed),
              args_.atomics ? "" : ", no atomics");
  std::string rss = kCheckRss ? "anonymous rss " + std::to_string(kRssSlackKiB) + " KiB"
                              : std::string("rss not checked (AddressSanitizer)");
  std::printf("tolerated growth after warm-up: %s, fds %ld, threads %ld, mappings %ld, registrations 0\n",
              rss.c_str(), kFdSlack, kThreadSlack, kMappingSlack);
  print("start", at_start);
  Resources warm{};
  for (std::uint32_t phase = 0; phase < args_.phases; ++phase) {
    phase_end_ = args_.ops * (phase + 1) / args_.phases;
    while (completed_ < phase_end_) {
      issue();
      drain_completions(true);
    }
    drain_all();
    check_counters();
    churn();
    if (phase == 0) {
      warm = measure(*target_ctx_, *initiator_ctx_);
      print("warm", warm);
    }
  }
  Resources at_end = settled_measure(warm);
  print("end", at_end);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ops %llu (", static_cast<unsigned long long>(completed_));
  for (int k = 0; k < 6; ++k)
    std::printf("%s%s %llu", k ? ", " : "", kKindNames[k], static_cast<unsigned long long>(per_kind_[k]));
  std::printf("), bytes verified %llu, reconnects %llu, %.1f s\n",
              static_cast<unsigned long long>(bytes_verified_), static_cast<unsigned long long>(reconnects_),
              seconds);
  std::string growth = growth_beyond_tolerance(warm, at_end);
  if (!growth.empty()) die("resources leak after warm-up: " + growth);
  std::printf("rdmakit-soak: PASS\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, args)) {
    std::fprintf(stderr,
                 "usage: rdmakit-soak [-n ops] [-c connections] [--transport tcp|shm|verbs] [--seed s] [-w "
                 "window 1-1024] "
                 "[--phases p>=2] [--inject corrupt|atomic|leak] [--listen host:port] [--target-device D] "
                 "[--initiator-device D] [--no-atomics]\n");
    return 2;
  }
  return Soak(args).run();
}
