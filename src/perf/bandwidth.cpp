#include "perf/bandwidth.hpp"

#include <array>
#include <string>

namespace rdmakit::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStall = std::chrono::seconds(30);  // no completion this long: the run is stuck
constexpr std::size_t kPollBatch = 64;

std::string failed(const Completion& c) {
  return std::string(to_string(c.opcode)) + " on connection " + std::to_string(c.connection) +
         " completed with " + std::string(to_string(c.status));
}

// Polls or sleeps for completions; 0 means none yet (poll) and is never returned by a block wait that
// did not time out.
Result<std::size_t> take_completions(CompletionQueue& cq, CompletionMode mode, std::span<Completion> out) {
  if (mode == CompletionMode::Poll) return cq.poll(out);
  return cq.wait(out, std::chrono::milliseconds(100), WaitMode::Block);
}

// Posts the lane's next `count` operations as one chain. Signalling goes by position, not by chain: the
// lane's k-th operation is signaled when k is a multiple of cq_mod or the last one (`stop`).
// A working set gives each operation its own position; `pieces` holds their local segments while the
// chain is posted.
Result<void> post_chain(Lane& lane, const BandwidthPlan& plan, std::uint64_t count, std::uint64_t stop,
                        std::vector<WorkRequest>& chain, std::vector<Segment>& pieces) {
  chain.assign(count, WorkRequest{.opcode = plan.opcode,
                                  .local = std::span(&lane.local, 1),
                                  .remote = lane.remote,
                                  .signaled = false});
  if (lane.positions > 1) pieces.assign(count, lane.local);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t k = lane.posted + i + 1;
    chain[i].signaled = k % plan.cq_mod == 0 || k == stop;
    if (lane.positions == 1) continue;
    const std::uint64_t offset = (k - 1) % lane.positions * lane.stride;
    pieces[i].addr += offset;
    chain[i].local = std::span(&pieces[i], 1);
    chain[i].remote.addr += offset;
  }
  auto first = lane.connection->post(chain);
  if (!first) return std::unexpected(first.error());
  for (std::uint64_t i = 0; i < count; ++i)
    if (chain[i].signaled) lane.signaled.emplace_back(*first + i, lane.posted + i + 1);
  lane.posted += count;
  return {};
}

// Keeps the window full, as perftest does: whatever room the completions freed is posted at once, in
// chains of post_list (default cq_mod). Since a signaled operation ends every cq_mod and the last one,
// the window never drains to wait for a chain's own end, and the lane stops on a signaled operation.
// (Chain length matters on Soft-RoCE: in the VM, chains of 100-128 64 KiB WRITEs ran at 0.3-0.5x the
// rate of single posts, perftest's default; see bench/RESULTS.md, verbs.)
Result<void> refill(Lane& lane, const BandwidthPlan& plan, std::uint64_t stop,
                    std::vector<WorkRequest>& chain, std::vector<Segment>& pieces) {
  const std::uint64_t room = plan.depth - (lane.posted - lane.completed);
  std::uint64_t left = std::min(room, stop - lane.posted);
  while (left > 0) {
    const std::uint64_t count = std::min<std::uint64_t>(left, plan.post_list ? plan.post_list : plan.cq_mod);
    if (auto ok = post_chain(lane, plan, count, stop, chain, pieces); !ok) return ok;
    left -= count;
  }
  return {};
}

Result<void> complete(std::vector<Lane>& lanes, const Completion& c) {
  if (!c.ok()) return fail(Errc::TransportFailure, failed(c));
  for (Lane& lane : lanes) {
    if (lane.connection->number() != c.connection) continue;
    if (lane.signaled.empty() || lane.signaled.front().first != c.id)
      return fail(Errc::ProtocolError, "completion " + std::to_string(c.id) + " out of order on connection " +
                                           std::to_string(c.connection));
    lane.completed = lane.signaled.front().second;
    lane.signaled.pop_front();
    return {};
  }
  return fail(Errc::ProtocolError, "a completion for unknown connection " + std::to_string(c.connection));
}

}  // namespace

Result<std::vector<Mark>> run_bandwidth(std::vector<Lane>& lanes, CompletionQueue& send_cq,
                                        const BandwidthPlan& plan) {
  for (Lane& lane : lanes) lane.posted = lane.completed = 0, lane.signaled.clear();  // a run starts drained
  std::vector<Mark> marks;
  marks.reserve(plan.ops_per_lane ? plan.ops_per_lane * lanes.size() / plan.cq_mod + 16 : 1 << 16);
  std::vector<WorkRequest> chain;
  chain.reserve(plan.depth);
  std::vector<Segment> pieces;
  pieces.reserve(plan.depth);
  std::array<Completion, kPollBatch> batch;
  const auto start = Clock::now();
  auto last_progress = start;
  // Each lane posts up to its stop. A timed run's stop is open until `until`; then it closes at the next
  // multiple of cq_mod, so that the lane's last operation is a signaled one.
  std::vector<std::uint64_t> stops(lanes.size(), plan.ops_per_lane ? plan.ops_per_lane : ~std::uint64_t{0});
  bool timed_out = !plan.until.has_value();
  auto check_deadline = [&](Clock::time_point now) {
    if (timed_out || now < *plan.until) return;
    timed_out = true;
    for (std::size_t i = 0; i < lanes.size(); ++i)
      stops[i] = (lanes[i].posted + plan.cq_mod - 1) / plan.cq_mod * plan.cq_mod;
  };
  check_deadline(start);
  std::uint64_t idle = 0;
  for (;;) {
    bool all_done = true;
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      Lane& lane = lanes[i];
      if (auto ok = refill(lane, plan, stops[i], chain, pieces); !ok) return std::unexpected(ok.error());
      if (lane.completed < lane.posted || lane.posted < stops[i]) all_done = false;
    }
    if (all_done) break;
    auto n = take_completions(send_cq, plan.mode, batch);
    if (!n) return std::unexpected(n.error());
    for (std::size_t i = 0; i < *n; ++i) {
      if (auto ok = complete(lanes, batch[i]); !ok) return std::unexpected(ok.error());
    }
    // The clock only when something completed, or now and then while idle: reading it may be a system
    // call (a clock source without vDSO support, as in a VM), which would slow every spin.
    if (*n == 0) {
      if ((++idle & 0xff) != 0) continue;
      const auto now = Clock::now();
      check_deadline(now);
      if (now - last_progress > kStall) return fail(Errc::Timeout, "bandwidth run: no completion for 30 s");
      continue;
    }
    std::uint64_t total = 0;
    for (const Lane& lane : lanes) total += lane.completed;
    last_progress = Clock::now();
    marks.push_back(
        Mark{total, std::chrono::duration_cast<std::chrono::nanoseconds>(last_progress - start).count()});
    check_deadline(last_progress);
  }
  return marks;
}

Result<void> run_receiver(std::vector<ReceiveLane>& lanes, CompletionQueue& recv_cq, std::uint32_t depth,
                          CompletionMode mode,
                          const std::function<Result<std::optional<std::uint64_t>>()>& poll_target) {
  std::optional<std::uint64_t> target;
  std::array<Completion, kPollBatch> batch;
  std::uint64_t idle = 0;
  auto last_progress = Clock::now();
  for (;;) {
    std::uint64_t received = 0;
    for (ReceiveLane& lane : lanes) {
      while (lane.posted < depth) {
        auto id = lane.connection->post_recv(lane.buffer);
        if (!id) return std::unexpected(id.error());
        ++lane.posted;
      }
      received += lane.received;
    }
    if (target && received >= *target) return {};
    auto n = take_completions(recv_cq, mode, batch);
    if (!n) return std::unexpected(n.error());
    for (std::size_t i = 0; i < *n; ++i) {
      const Completion& c = batch[i];
      if (!c.ok()) return fail(Errc::TransportFailure, failed(c));
      for (ReceiveLane& lane : lanes)
        if (lane.connection->number() == c.connection) --lane.posted, ++lane.received;
    }
    if (*n > 0) {
      last_progress = Clock::now();
      continue;
    }
    // Nothing arrived: a good moment to look for the client's End (cheap, but not free).
    if (!target && (mode == CompletionMode::Block || (++idle & 0xff) == 0)) {
      auto got = poll_target();
      if (!got) return std::unexpected(got.error());
      target = *got;
    }
    if ((idle & 0xfff) == 0 && Clock::now() - last_progress > kStall)
      return fail(Errc::Timeout, "send_bw receiver: nothing received for 30 s");
  }
}

Result<Completion> wait_one(CompletionQueue& cq, CompletionMode mode, std::chrono::milliseconds timeout) {
  Completion c;
  if (mode == CompletionMode::Block) {
    auto n = cq.wait(std::span(&c, 1), timeout, WaitMode::Block);
    if (!n) return std::unexpected(n.error());
    if (*n == 0)
      return fail(Errc::Timeout, "no completion within " + std::to_string(timeout.count()) + " ms");
    return c;
  }
  // No clock on the way to a completion that comes soon: in a latency loop a clock read (a system call
  // where the clock source has no vDSO support, as in a VM) would be part of every sample.
  std::optional<Clock::time_point> deadline;
  for (std::uint32_t spins = 1;; ++spins) {
    if (cq.poll(std::span(&c, 1)) == 1) return c;
    if ((spins & 0xffff) != 0) continue;
    const auto now = Clock::now();
    if (!deadline) deadline = now + timeout;
    if (now > *deadline)
      return fail(Errc::Timeout, "no completion within " + std::to_string(timeout.count()) + " ms");
  }
}

}  // namespace rdmakit::perf
