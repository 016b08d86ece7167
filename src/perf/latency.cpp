#include "perf/latency.hpp"

#include <atomic>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <optional>
#include <string>

#include "perf/bandwidth.hpp"

namespace rdmakit::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTimeout = std::chrono::milliseconds(30000);
constexpr std::uint64_t kSignalEvery =
    64;  // write_lat/send_lat: one signaled op in 64, like perftest's cq_mod

// Time stamps of the samples: the CPU's time-stamp counter where there is one (perftest's get_cycles),
// else steady_clock. Reading the TSC is one instruction; a clock read is a system call where the clock
// source has no vDSO support (hpet in a VM), and a sample holds about one of them. Ticks become
// microseconds by the rate measured against steady_clock over the whole loop.
class Stamps {
 public:
  static std::uint64_t now() noexcept {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
#endif
  }
  static double ticks(std::uint64_t t0, std::uint64_t t1) noexcept {
    return t1 > t0 ? static_cast<double>(t1 - t0) : 0.0;  // a TSC that went back (CPU change) is 0
  }
  // Converts samples taken as ticks (times `factor`) to microseconds.
  void to_us(std::vector<double>& samples, double factor) const {
    const std::uint64_t tick1 = now();
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start_).count();
    const double per_tick = tick1 > tick0_ ? ns / 1000.0 / static_cast<double>(tick1 - tick0_) : 0.0;
    for (double& sample : samples) sample *= per_tick * factor;
  }

 private:
  Clock::time_point start_ = Clock::now();
  std::uint64_t tick0_ = now();
};

// kTimeout from the first look at it, not from its creation: a latency round reads the clock only for its
// two time stamps (elsewhere a clock read may be a system call, e.g. in a VM whose clock source has no vDSO
// support, and would be part of every sample). Looked at only after many idle spins.
class Deadline {
 public:
  bool passed() {
    const auto now = Clock::now();
    if (!at_) at_ = now + kTimeout;
    return now > *at_;
  }

 private:
  std::optional<Clock::time_point> at_;
};

// Whether round `round` (1-based) runs. A timed plan's clock starts when the warm-up is over.
class Rounds {
 public:
  explicit Rounds(const LatencyPlan& plan) : plan_(plan) {}
  bool keep_going(std::uint64_t round) {
    if (plan_.iterations) return round <= plan_.warmup + plan_.iterations;
    if (round <= plan_.warmup) return true;
    if (round == plan_.warmup + 1) until_ = Clock::now() + plan_.duration;
    return Clock::now() < until_;
  }

 private:
  const LatencyPlan& plan_;
  Clock::time_point until_{};
};

// Reaps signaled completions without waiting; a failed one ends the run.
Result<void> drain(CompletionQueue& cq) {
  Completion batch[16];
  for (std::size_t n; (n = cq.poll(batch)) > 0;)
    for (std::size_t i = 0; i < n; ++i)
      if (!batch[i].ok())
        return fail(Errc::TransportFailure, std::string(to_string(batch[i].opcode)) + " completed with " +
                                                std::string(to_string(batch[i].status)));
  return {};
}

// Spins until the peer's WRITE has put `mark` in the last byte. The byte is written by another agent (the
// tcp progress thread, the peer process through shm, a NIC), so it is read with an atomic load each time.
Result<bool> wait_for_mark(const PingPongEnd& end, std::uint64_t size, std::uint8_t mark,
                           const std::function<bool()>* stop) {
  std::atomic_ref<std::uint8_t> last(end.local[size - 1]);
  Deadline deadline;
  for (std::uint64_t spins = 1; last.load(std::memory_order_acquire) != mark; ++spins) {
    // Polling the completion queue while spinning lets a software transport that progresses from polls
    // (tcp) carry out the peer's WRITE in this thread, as ucx_perftest's put_lat calls progress while it
    // spins on memory; on verbs it only reaps our own signaled WRITEs.
    if (auto ok = drain(end.connection->send_cq()); !ok) return std::unexpected(ok.error());
    if ((spins & 0xffff) != 0) continue;
    if (stop && (*stop)()) return false;
    if (deadline.passed()) return fail(Errc::Timeout, "write_lat: the peer's WRITE did not arrive in 30 s");
    if (auto ok = end.connection->health(); !ok) return std::unexpected(ok.error());
  }
  return true;
}

Result<void> post_write(const PingPongEnd& end, std::uint64_t round) {
  auto id = end.connection->write(end.segment, end.remote, round % kSignalEvery == 0);
  if (!id) return std::unexpected(id.error());
  return drain(end.connection->send_cq());
}

// Waits for one receive, or returns nullopt once `stop` says the peer is done.
Result<std::optional<Completion>> wait_recv(CompletionQueue& cq, CompletionMode mode,
                                            const std::function<bool()>* stop) {
  Deadline deadline;
  for (;;) {
    auto c = wait_one(cq, mode, std::chrono::milliseconds(stop ? 5 : kTimeout.count()));
    if (c) {
      if (!c->ok())
        return fail(Errc::TransportFailure, "receive completed with " + std::string(to_string(c->status)));
      return std::optional<Completion>(*c);
    }
    if (c.error().code() != Errc::Timeout || deadline.passed()) return std::unexpected(c.error());
    if (stop && (*stop)()) return std::optional<Completion>{};
  }
}

// send_lat: looks at the send queue only after a signaled send, as perftest's send_lat does; the rest of
// the rounds poll only the receive queue. (A poll of an empty queue is a lock and an ibv_poll_cq: on
// Soft-RoCE under TCG about a microsecond per round and side, which perftest does not spend.) What a
// look misses is taken at the next one, kSignalEvery rounds later.
Result<void> reap_sends(CompletionQueue& send_cq, std::uint64_t round) {
  if (round % kSignalEvery != 0) return {};
  return drain(send_cq);
}

Result<void> send_and_repost(const PingPongEnd& end, std::uint64_t round) {
  if (auto id = end.connection->post_recv(end.local_segment); !id) return std::unexpected(id.error());
  WorkRequest send{
      .opcode = Opcode::Send, .local = std::span(&end.segment, 1), .signaled = round % kSignalEvery == 0};
  if (auto id = end.connection->post(std::span(&send, 1)); !id) return std::unexpected(id.error());
  return {};
}

}  // namespace

Result<std::vector<double>> write_pingpong_initiator(const PingPongEnd& end, const LatencyPlan& plan,
                                                     std::uint64_t* rounds_done) {
  std::vector<double> samples;
  samples.reserve(plan.iterations ? plan.iterations : 1 << 20);
  std::uint8_t* source_last = reinterpret_cast<std::uint8_t*>(end.segment.addr) + plan.size - 1;
  Rounds rounds(plan);
  Stamps stamps;
  std::uint64_t round = 1;
  for (; rounds.keep_going(round); ++round) {
    const std::uint8_t mark = round_mark(round);
    *source_last = mark;
    const auto t0 = Stamps::now();
    if (auto ok = post_write(end, round); !ok) return std::unexpected(ok.error());
    if (auto got = wait_for_mark(end, plan.size, mark, nullptr); !got) return std::unexpected(got.error());
    const auto t1 = Stamps::now();
    if (round > plan.warmup) samples.push_back(Stamps::ticks(t0, t1));
  }
  *rounds_done = round - 1;
  stamps.to_us(samples, 0.5);
  return samples;
}

Result<void> write_pingpong_responder(const PingPongEnd& end, const LatencyPlan& plan, std::uint64_t rounds,
                                      const std::function<bool()>& stop) {
  std::uint8_t* source_last = reinterpret_cast<std::uint8_t*>(end.segment.addr) + plan.size - 1;
  for (std::uint64_t round = 1; rounds == 0 || round <= rounds; ++round) {
    const std::uint8_t mark = round_mark(round);
    auto got = wait_for_mark(end, plan.size, mark, &stop);
    if (!got) return std::unexpected(got.error());
    if (!*got) return {};
    *source_last = mark;
    if (auto ok = post_write(end, round); !ok) return std::unexpected(ok.error());
  }
  return {};
}

Result<std::vector<double>> send_pingpong_initiator(const PingPongEnd& end, CompletionQueue& send_cq,
                                                    CompletionQueue& recv_cq, const LatencyPlan& plan,
                                                    std::uint64_t* rounds_done) {
  std::vector<double> samples;
  samples.reserve(plan.iterations ? plan.iterations : 1 << 20);
  Rounds rounds(plan);
  Stamps stamps;
  std::uint64_t round = 1;
  for (; rounds.keep_going(round); ++round) {
    const auto t0 = Stamps::now();
    WorkRequest send{
        .opcode = Opcode::Send, .local = std::span(&end.segment, 1), .signaled = round % kSignalEvery == 0};
    if (auto id = end.connection->post(std::span(&send, 1)); !id) return std::unexpected(id.error());
    auto got = wait_recv(recv_cq, plan.mode, nullptr);
    if (!got) return std::unexpected(got.error());
    if (auto id = end.connection->post_recv(end.local_segment); !id) return std::unexpected(id.error());
    const auto t1 = Stamps::now();
    if (auto ok = reap_sends(send_cq, round); !ok) return std::unexpected(ok.error());
    if (round > plan.warmup) samples.push_back(Stamps::ticks(t0, t1));
  }
  *rounds_done = round - 1;
  stamps.to_us(samples, 0.5);
  return samples;
}

Result<void> send_pingpong_responder(const PingPongEnd& end, CompletionQueue& send_cq,
                                     CompletionQueue& recv_cq, const LatencyPlan& plan,
                                     const std::function<bool()>& stop) {
  for (std::uint64_t round = 1;; ++round) {
    auto got = wait_recv(recv_cq, plan.mode, &stop);
    if (!got) return std::unexpected(got.error());
    if (!*got) return {};
    if (auto ok = send_and_repost(end, round); !ok) return std::unexpected(ok.error());
    if (auto ok = reap_sends(send_cq, round); !ok) return std::unexpected(ok.error());
  }
}

Result<std::vector<double>> read_latency(const PingPongEnd& end, CompletionQueue& send_cq,
                                         const LatencyPlan& plan, std::uint64_t* ops_done) {
  std::vector<double> samples;
  samples.reserve(plan.iterations ? plan.iterations : 1 << 20);
  Rounds rounds(plan);
  Stamps stamps;
  std::uint64_t round = 1;
  for (; rounds.keep_going(round); ++round) {
    const auto t0 = Stamps::now();
    auto id = end.connection->read(end.segment, end.remote);
    if (!id) return std::unexpected(id.error());
    auto c = wait_one(send_cq, plan.mode, kTimeout);
    if (!c) return std::unexpected(c.error());
    const auto t1 = Stamps::now();
    if (!c->ok())
      return fail(Errc::TransportFailure, "read completed with " + std::string(to_string(c->status)));
    if (round > plan.warmup) samples.push_back(Stamps::ticks(t0, t1));
  }
  *ops_done = round - 1;
  stamps.to_us(samples, 1.0);
  return samples;
}

Result<std::vector<double>> atomic_latency(const PingPongEnd& end, CompletionQueue& send_cq,
                                           const LatencyPlan& plan, std::uint64_t* ops_done) {
  std::vector<double> samples;
  samples.reserve(plan.iterations ? plan.iterations : 1 << 20);
  Segment old_value{end.segment.addr, 8, end.segment.lkey};
  Rounds rounds(plan);
  Stamps stamps;
  std::uint64_t round = 1;
  for (; rounds.keep_going(round); ++round) {
    const auto t0 = Stamps::now();
    auto id = end.connection->fetch_add(old_value, end.remote, 1);
    if (!id) return std::unexpected(id.error());
    auto c = wait_one(send_cq, plan.mode, kTimeout);
    if (!c) return std::unexpected(c.error());
    const auto t1 = Stamps::now();
    if (!c->ok())
      return fail(Errc::TransportFailure, "fetch_add completed with " + std::string(to_string(c->status)));
    std::uint64_t old = *reinterpret_cast<const std::uint64_t*>(old_value.addr);
    if (old != round - 1)
      return fail(Errc::ProtocolError, "fetch_add #" + std::to_string(round) + " returned " +
                                           std::to_string(old) + ", expected " + std::to_string(round - 1));
    if (round > plan.warmup) samples.push_back(Stamps::ticks(t0, t1));
  }
  *ops_done = round - 1;
  stamps.to_us(samples, 1.0);
  return samples;
}

}  // namespace rdmakit::perf
