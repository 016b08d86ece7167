// The latency loops. Each returns one sample per timed iteration, in microseconds:
//  * write_lat and send_lat are ping-pongs and report half the round trip, as perftest does;
//  * read_lat and atomic_lat report the whole operation (post to completion), as perftest does.
// write_lat never looks at a completion queue: each side spins on the last byte of its own buffer until the
// peer's WRITE has changed it (perftest's ib_write_lat), so its mode is always "poll (memory)".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "perf/params.hpp"
#include "rdmakit/connection.hpp"

namespace rdmakit::perf {

struct LatencyPlan {
  std::uint64_t size = 8;
  std::uint64_t warmup = 100;
  std::uint64_t iterations = 1000;  // 0: for `duration`, counted from the end of the warm-up
  std::chrono::nanoseconds duration{0};
  CompletionMode mode = CompletionMode::Poll;
};

// One side of a ping-pong: this side's buffer (the peer writes/sends into it) and the peer's.
struct PingPongEnd {
  Connection* connection = nullptr;
  std::uint8_t* local = nullptr;  // where the peer's WRITEs and SENDs land (registered)
  Segment local_segment;          // the same bytes as a segment, for receives
  Segment segment;                // what this side writes, sends, reads into (another part of its buffer)
  RemoteAddress remote;
};

// The value the last byte carries in round `round` (never 0, which is what a prepared buffer holds).
inline std::uint8_t round_mark(std::uint64_t round) { return static_cast<std::uint8_t>(round % 255 + 1); }

// write_lat. The initiator writes first and times; the responder echoes. `rounds_done` (responder) tells
// how many rounds it answered. The responder stops after `rounds` rounds, known from the initiator's plan.
Result<std::vector<double>> write_pingpong_initiator(const PingPongEnd& end, const LatencyPlan& plan,
                                                     std::uint64_t* rounds_done);
Result<void> write_pingpong_responder(const PingPongEnd& end, const LatencyPlan& plan, std::uint64_t rounds,
                                      const std::function<bool()>& stop);

// send_lat: each side keeps one receive posted into its buffer.
Result<std::vector<double>> send_pingpong_initiator(const PingPongEnd& end, CompletionQueue& send_cq,
                                                    CompletionQueue& recv_cq, const LatencyPlan& plan,
                                                    std::uint64_t* rounds_done);
Result<void> send_pingpong_responder(const PingPongEnd& end, CompletionQueue& send_cq,
                                     CompletionQueue& recv_cq, const LatencyPlan& plan,
                                     const std::function<bool()>& stop);

// read_lat / atomic_lat (fetch-and-add of 1 on the peer's first word; the old values are checked to
// count up by one, so a lost or doubled atomic fails the run).
Result<std::vector<double>> read_latency(const PingPongEnd& end, CompletionQueue& send_cq,
                                         const LatencyPlan& plan, std::uint64_t* ops_done);
Result<std::vector<double>> atomic_latency(const PingPongEnd& end, CompletionQueue& send_cq,
                                           const LatencyPlan& plan, std::uint64_t* ops_done);

}  // namespace rdmakit::perf
