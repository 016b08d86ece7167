// The bandwidth loops: one thread keeps `depth` operations outstanding on each of several connections
// (perftest -q/-t) and records progress marks at completions; the receiver side of send_bw keeps receives
// posted.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "perf/params.hpp"
#include "perf/stats.hpp"
#include "rdmakit/connection.hpp"

namespace rdmakit::perf {

// One connection's share of a bandwidth run.
struct Lane {
  Connection* connection = nullptr;
  Segment local;
  RemoteAddress remote;
  // The k-th operation moves position k % positions: `stride` bytes further into both buffers per position
  // (--working-set). One position: every operation reuses the same slot, as perftest does.
  std::uint64_t positions = 1;
  std::uint64_t stride = 0;
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> signaled;  // (id, posted count it covers), in order
};

struct BandwidthPlan {
  Opcode opcode = Opcode::Write;
  std::uint64_t ops_per_lane = 0;  // 0: until `until`
  std::optional<std::chrono::steady_clock::time_point> until;
  std::uint32_t depth = 128;
  std::uint32_t cq_mod = 16;
  std::uint32_t post_list = 0;  // most operations per post; 0: cq_mod
  CompletionMode mode = CompletionMode::Poll;
};

// Runs the plan to its end (every posted operation completed). Marks count operations over all lanes;
// their clock starts at the call. Any failed completion ends the run with an error naming it.
Result<std::vector<Mark>> run_bandwidth(std::vector<Lane>& lanes, CompletionQueue& send_cq,
                                        const BandwidthPlan& plan);

// The receiving side of send_bw: keeps up to `depth` receives posted per connection (they persist
// across calls in `posted`) and returns once the lanes together received the target, which becomes known
// when `poll_target` returns it (the client's End message).
struct ReceiveLane {
  Connection* connection = nullptr;
  Segment buffer;
  std::uint64_t posted = 0;    // receives posted and not yet consumed
  std::uint64_t received = 0;  // consumed in this call
};
Result<void> run_receiver(std::vector<ReceiveLane>& lanes, CompletionQueue& recv_cq, std::uint32_t depth,
                          CompletionMode mode,
                          const std::function<Result<std::optional<std::uint64_t>>()>& poll_target);

// Waits for one completion on `cq` in the given mode; Errc::Timeout after `timeout`.
Result<Completion> wait_one(CompletionQueue& cq, CompletionMode mode, std::chrono::milliseconds timeout);

}  // namespace rdmakit::perf
