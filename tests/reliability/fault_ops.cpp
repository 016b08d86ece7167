// The fault matrix's survivor side (fault_ops.hpp).
#include "reliability/fault_ops.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace rdmakit::faults {

namespace {

std::string describe(const Op& op, std::size_t index) {
  return std::string(to_string(op.opcode)) + " #" + std::to_string(index) + " (local " +
         std::to_string(op.local) + ", remote " + std::to_string(op.remote) + ", " +
         std::to_string(op.length) + " bytes)";
}

template <typename T>
std::string posted(Rig& rig, Op op, const Result<T>& id) {
  if (!id) return "post " + std::string(to_string(op.opcode)) + ": " + id.error().describe();
  op.id = *id;
  rig.ops.push_back(op);
  return {};
}

// A range [begin, end) of one side's region.
struct Range {
  std::uint64_t begin, end;
};

// Checks that every byte outside `touched` still holds `seed`'s pattern.
std::string check_untouched(const unsigned char* base, std::vector<Range> touched, std::uint64_t seed,
                            const char* side) {
  std::sort(touched.begin(), touched.end(), [](Range a, Range b) { return a.begin < b.begin; });
  std::uint64_t at = 0;
  touched.push_back({kRegionSize, kRegionSize});
  for (const Range& r : touched) {
    if (r.begin > at)
      if (auto bad = find_mismatch(base, at, r.begin - at, seed, at); bad >= 0)
        return std::string(side) + " memory outside the touched ranges changed at byte " +
               std::to_string(bad);
    at = std::max(at, r.end);
  }
  return {};
}

}  // namespace

std::string Rig::start(const std::string& name, std::chrono::milliseconds timeout_ms,
                       const std::string& listen, const std::string& netns) {
  transport = name;
  timeout = timeout_ms;
  memfd = ::memfd_create("rdmakit-fault-peer", 0);  // inherited by the peer: no MFD_CLOEXEC
  if (memfd < 0 || ::ftruncate(memfd, kRegionSize) != 0) return "memfd: " + std::string(std::strerror(errno));
  void* mapped = ::mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (mapped == MAP_FAILED) return "mmap: " + std::string(std::strerror(errno));
  peer_memory = static_cast<unsigned char*>(mapped);
  fill_pattern(peer_memory, 0, kRegionSize, kPeerSeed);
  std::memset(peer_memory + kCounters, 0, 16);  // the atomics' counters start at 0
  if (!peer.start(transport, memfd, timeout, listen, netns)) return "the peer did not start";
  Options options{.transport = transport,
                  .name = "fault-survivor",
                  .timeout = timeout,
                  .rnr_timeout = timeout / 2,
                  .connect_timeout = std::chrono::milliseconds(10000)};
  auto opened = Context::open(options);
  if (!opened) return "open: " + opened.error().describe();
  context = *opened;
  auto region = context->allocate(kRegionSize, Access::LocalWrite);
  if (!region) return "allocate: " + region.error().describe();
  local = *region;
  fill_pattern(local->data(), 0, kRegionSize, kLocalSeed);
  auto connected = context->connect(peer.address());
  if (!connected) return "connect: " + connected.error().describe();
  connection = *connected;
  if (!peer.accepted()) return "the peer did not accept";
  return {};
}

Rig::~Rig() {
  connection.reset();
  peer.signal(SIGKILL);
  if (peer_memory) ::munmap(peer_memory, kRegionSize);
  if (memfd >= 0) ::close(memfd);
}

std::string Rig::write(std::uint64_t offset, std::uint32_t length) {
  Op op{.opcode = Opcode::Write, .local = offset, .remote = offset, .length = length};
  return posted(*this, op, connection->write(local->slice(offset, length), peer.region().at(offset)));
}

std::string Rig::read(std::uint64_t offset, std::uint32_t length) {
  Op op{.opcode = Opcode::Read, .local = offset, .remote = offset, .length = length};
  return posted(*this, op, connection->read(local->slice(offset, length), peer.region().at(offset)));
}

// Each adds 1 to counter 0: the n-th must return n.
std::string Rig::fetch_add() {
  std::uint64_t result = kResults + 8 * ops.size();
  Op op{.opcode = Opcode::FetchAdd, .local = result, .remote = kCounters, .length = 8};
  op.expected_old = static_cast<std::uint64_t>(fetch_adds++);
  return posted(*this, op, connection->fetch_add(local->slice(result, 8), peer.region().at(kCounters), 1));
}

// The n-th swaps counter 1 from n to n + 1: it must return n (the counter starts at 0).
std::string Rig::compare_swap() {
  std::uint64_t result = kResults + 8 * ops.size();
  Op op{.opcode = Opcode::CompareSwap, .local = result, .remote = kCounters + 8, .length = 8};
  op.expected_old = static_cast<std::uint64_t>(compare_swaps++);
  return posted(*this, op,
                connection->compare_swap(local->slice(result, 8), peer.region().at(kCounters + 8),
                                         op.expected_old, op.expected_old + 1));
}

// The n-th SEND lands in the peer's n-th receive slot (receives are consumed in order).
std::string Rig::send(std::uint32_t length) {
  if (sends >= kSlotCount) return "more SENDs than the peer posted receives";
  std::uint64_t slot = kSlots + static_cast<std::uint64_t>(sends++) * kSlotSize;
  Op op{.opcode = Opcode::Send, .local = slot, .remote = slot, .length = length};
  return posted(*this, op, connection->send(local->slice(slot, length)));
}

std::string Rig::post_mix(int round) {
  for (std::uint64_t i = 0; i < 4; ++i) {
    std::uint64_t at = static_cast<std::uint64_t>(round) * 4 + i;
    for (auto bad : {write(at * kMiB, kMiB), read((16 + at) * kMiB, kMiB), send(kSlotSize - 8 * i)})
      if (!bad.empty()) return bad;
    for (int k = 0; k < 4; ++k)
      for (auto bad : {fetch_add(), compare_swap()})
        if (!bad.empty()) return bad;
  }
  return {};
}

std::string Rig::collect(Clock::time_point deadline, std::size_t count) {
  for (std::size_t i = 0; i < ops.size() && count > 0; ++i) {
    if (ops[i].done != Clock::time_point{}) continue;  // taken already
    --count;
    auto done = connection->wait(ops[i].id, std::max(deadline - Clock::now(), Clock::duration::zero()));
    if (!done) return describe(ops[i], i) + " did not complete in time: " + done.error().describe();
    ops[i].status = done->status;
    ops[i].done = Clock::now();
  }
  return {};
}

Clock::duration detection_bound(std::chrono::milliseconds timeout) {
  std::chrono::milliseconds extra{0};
  if (const char* env = std::getenv("RDMAKIT_TEST_FAULT_SLACK_MS"); env && *env)
    extra = std::chrono::milliseconds(std::strtol(env, nullptr, 10));
  return timeout + std::max<std::chrono::milliseconds>(std::chrono::seconds(1), timeout / 2) + extra;
}

std::string check_bound(const char* what, Clock::duration took, std::chrono::milliseconds timeout) {
  auto bound = detection_bound(timeout);
  if (took <= bound) return {};
  auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  return std::string(what) + " took " + std::to_string(ms(took)) + " ms, beyond the bound of " +
         std::to_string(ms(bound)) + " ms (timeout " + std::to_string(timeout.count()) +
         " ms + max(1 s, timeout / 2) + RDMAKIT_TEST_FAULT_SLACK_MS)";
}

Clock::time_point Rig::first_failure() const {
  for (const Op& op : ops)
    if (op.status != Status::Success) return op.done;
  return {};
}

std::string check_status_order(const Rig& rig, bool failure_required) {
  auto first = std::find_if(rig.ops.begin(), rig.ops.end(),
                            [](const Op& op) { return !(op.status == Status::Success); });
  if (first == rig.ops.end()) return failure_required ? "no operation failed" : "";
  if (first->status != Status::TransportRetryExceeded && first->status != Status::Flushed)
    return "the first failure is " + std::string(to_string(first->status)) + " (" +
           describe(*first, static_cast<std::size_t>(first - rig.ops.begin())) + ")";
  for (auto it = first + 1; it != rig.ops.end(); ++it)
    if (it->status != Status::Flushed)
      return describe(*it, static_cast<std::size_t>(it - rig.ops.begin())) +
             " behind the failure completed " + std::string(to_string(it->status));
  return {};
}

namespace {

// What a successful op must have left behind; the touched ranges of both sides are collected meanwhile.
std::string check_success(const Rig& rig, const Op& op, std::size_t index, std::vector<Range>& local,
                          std::vector<Range>& remote) {
  const auto* mine = static_cast<const unsigned char*>(rig.local->data());
  bool ok = op.status == Status::Success;
  std::int64_t bad = -1;
  switch (op.opcode) {
    case Opcode::Write:
    case Opcode::Send:
      remote.push_back({op.remote, op.remote + (op.opcode == Opcode::Send ? kSlotSize : op.length)});
      if (ok) bad = find_mismatch(rig.peer_memory, op.remote, op.length, kLocalSeed, op.local);
      break;
    case Opcode::Read:
      local.push_back({op.local, op.local + op.length});
      if (ok) bad = find_mismatch(mine, op.local, op.length, kPeerSeed, op.remote);
      break;
    default: {
      local.push_back({op.local, op.local + 8});
      remote.push_back({op.remote, op.remote + 8});
      std::uint64_t old_value;
      std::memcpy(&old_value, mine + op.local, 8);
      if (ok && old_value != op.expected_old)
        return describe(op, index) + " succeeded returning " + std::to_string(old_value) + ", expected " +
               std::to_string(op.expected_old);
    }
  }
  if (bad >= 0)
    return describe(op, index) + " reported success but byte " + std::to_string(bad) + " did not land";
  return {};
}

std::string check_counter(const Rig& rig, Opcode opcode, std::uint64_t offset, bool exact) {
  std::uint64_t successes = 0, posted = 0, value;
  for (const Op& op : rig.ops)
    if (op.opcode == opcode) ++posted, successes += op.status == Status::Success;
  if (posted == 0) return {};
  std::memcpy(&value, rig.peer_memory + offset, 8);
  if (value < successes || value > posted || (exact && value != successes))
    return std::string(to_string(opcode)) + " counter holds " + std::to_string(value) + " after " +
           std::to_string(successes) + " successes of " + std::to_string(posted) + " posted" +
           (value > successes && exact ? " (an operation was applied twice or not reported)" : "");
  return {};
}

}  // namespace

std::string check_memory(const Rig& rig, bool exact_counters) {
  std::vector<Range> local, remote{{kCounters, kCounters + 16}};  // the counters start at 0, not patterned
  for (std::size_t i = 0; i < rig.ops.size(); ++i)
    if (auto bad = check_success(rig, rig.ops[i], i, local, remote); !bad.empty()) return bad;
  if (auto bad = check_counter(rig, Opcode::FetchAdd, kCounters, exact_counters); !bad.empty()) return bad;
  if (auto bad = check_counter(rig, Opcode::CompareSwap, kCounters + 8, exact_counters); !bad.empty())
    return bad;
  if (auto bad = check_untouched(static_cast<const unsigned char*>(rig.local->data()), local, kLocalSeed,
                                 "the survivor's");
      !bad.empty())
    return bad;
  return check_untouched(rig.peer_memory, remote, kPeerSeed, "the peer's");
}

}  // namespace rdmakit::faults
