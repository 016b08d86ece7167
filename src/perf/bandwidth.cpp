#include "perf/bandwidth.hpp"

#include <array>
#include <string>

namespace rdmakit::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStall = std::chrono::seconds(30);  // no completion this long: the run is stuck
constexpr std::size_t kPollBatch = 64;

std::int64_t elapsed_ns(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

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

// Posts as many whole groups of cq_mod operations as the window allows; the last of each group is signaled,
// so stopping after any group leaves nothing uncovered.
Result<void> refill(Lane& lane, const BandwidthPlan& plan, std::uint64_t target,
                    std::vector<WorkRequest>& chain) {
  for (;;) {
    std::uint64_t room = plan.depth - (lane.posted - lane.completed);
    std::uint64_t group = std::min<std::uint64_t>(plan.cq_mod, target - lane.posted);
    if (group == 0 || room < group) return {};
    chain.assign(group, WorkRequest{.opcode = plan.opcode,
                                    .local = std::span(&lane.local, 1),
                                    .remote = lane.remote,
                                    .signaled = false});
    chain.back().signaled = true;
    auto first = lane.connection->post(chain);
    if (!first) return std::unexpected(first.error());
    lane.posted += group;
    lane.signaled.emplace_back(*first + group - 1, lane.posted);
  }
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
  chain.reserve(plan.cq_mod);
  std::array<Completion, kPollBatch> batch;
  const auto start = Clock::now();
  auto last_progress = start;
  const std::uint64_t target = plan.ops_per_lane ? plan.ops_per_lane : ~std::uint64_t{0};
  bool posting = true;  // a timed run stops posting at `until` and drains what is outstanding
  std::uint64_t idle = 0;
  for (;;) {
    if (plan.until && posting && Clock::now() >= *plan.until) posting = false;
    bool all_done = true;
    for (Lane& lane : lanes) {
      if (posting)
        if (auto ok = refill(lane, plan, target, chain); !ok) return std::unexpected(ok.error());
      if (lane.completed < lane.posted || (posting && lane.posted < target)) all_done = false;
    }
    if (all_done) break;
    auto n = take_completions(send_cq, plan.mode, batch);
    if (!n) return std::unexpected(n.error());
    for (std::size_t i = 0; i < *n; ++i) {
      if (auto ok = complete(lanes, batch[i]); !ok) return std::unexpected(ok.error());
    }
    if (*n == 0) {
      if ((++idle & 0xfff) == 0 && Clock::now() - last_progress > kStall)
        return fail(Errc::Timeout, "bandwidth run: no completion for 30 s");
      continue;
    }
    std::uint64_t total = 0;
    for (const Lane& lane : lanes) total += lane.completed;
    marks.push_back(Mark{total, elapsed_ns(start)});
    last_progress = Clock::now();
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
  const auto deadline = Clock::now() + timeout;
  for (std::uint32_t spins = 0;; ++spins) {
    if (cq.poll(std::span(&c, 1)) == 1) return c;
    if ((spins & 0xffff) == 0 && Clock::now() > deadline)
      return fail(Errc::Timeout, "no completion within " + std::to_string(timeout.count()) + " ms");
  }
}

}  // namespace rdmakit::perf
