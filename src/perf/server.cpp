// The server (following) side of a run: prepares buffers for each size, serves two-sided and ping-pong
// tests, runs its own direction of a bidirectional test, and checks the data when the client is done.
#include <algorithm>
#include <chrono>

#include "perf/bandwidth.hpp"
#include "perf/latency.hpp"
#include "perf/roles.hpp"
#include "perf/run.hpp"
#include "perf/session.hpp"

namespace rdmakit::perf {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The client's End, taken early by a loop that had to watch for it.
struct EndWatch {
  ControlChannel& control;
  std::optional<ControlMessage> end;
  std::optional<Error> error;

  bool poll() {
    if (end || error) return true;
    auto got = control.try_receive();
    if (!got) return error = got.error(), true;
    if (*got) end = **got;
    return end.has_value();
  }
  Result<ControlMessage> wait() {
    if (error) return std::unexpected(*error);
    if (end) return *end;
    return control.expect(MessageKind::End, std::chrono::minutes(10));
  }
};

struct SizeRun {
  Test test;
  bool bidirectional;
  std::uint64_t size;
  std::uint64_t iterations;  // 0: timed
  std::uint64_t warmup;
  std::chrono::duration<double> duration;
};

PingPongEnd make_end(const Session& session, std::uint64_t size) {
  return PingPongEnd{.connection = session.data[0].get(),
                     .local = session.recv_area(0),
                     .local_segment = session.recv_segment(0, session.recv_capacity()),
                     .segment = session.send_segment(0, size),
                     .remote = session.remote_address(0)};
}

// The server's own direction of write_bw -b / read_bw -b; returns its timed ops and seconds.
Result<BandwidthSummary> own_direction(const Params& params, Session& session, const SizeRun& run) {
  std::vector<Lane> lanes(session.data.size());
  for (std::size_t i = 0; i < lanes.size(); ++i)
    lanes[i] = Lane{.connection = session.data[i].get(),
                    .local = session.send_segment(i, run.size),
                    .remote = session.remote_address(i),
                    .positions = positions_per_lane(session.working_set, run.size),
                    .stride = run.size};
  BandwidthPlan plan{.opcode = run.test == Test::ReadBw ? Opcode::Read : Opcode::Write,
                     .ops_per_lane = run.warmup,
                     .until = std::nullopt,
                     .depth = session.hello.tx_depth,
                     .cq_mod = std::min(params.cq_mod, session.hello.tx_depth),
                     .post_list = params.post_list,
                     .mode = params.mode};
  if (run.warmup)
    if (auto w = run_bandwidth(lanes, *session.send_cq, plan); !w) return std::unexpected(w.error());
  plan.ops_per_lane = run.iterations;
  if (!run.iterations) plan.until = Clock::now() + std::chrono::duration_cast<Clock::duration>(run.duration);
  auto marks = run_bandwidth(lanes, *session.send_cq, plan);
  if (!marks) return std::unexpected(marks.error());
  return summarize_bandwidth(run.size, *marks);
}

// Serves the size: returns the server's own figures for a bidirectional run.
Result<std::optional<BandwidthSummary>> serve(const Params& params, Session& session, const SizeRun& run,
                                              std::vector<ReceiveLane>& receivers, EndWatch& watch) {
  std::function<bool()> stop = [&] { return watch.poll(); };
  LatencyPlan plan{.size = run.size,
                   .warmup = run.warmup,
                   .iterations = run.iterations,
                   .duration = {},
                   .mode = params.mode};
  switch (run.test) {
    case Test::SendBw: {
      auto target = [&]() -> Result<std::optional<std::uint64_t>> {
        watch.poll();
        if (watch.error) return std::unexpected(*watch.error);
        if (!watch.end) return std::optional<std::uint64_t>{};
        return std::optional<std::uint64_t>(watch.end->count);
      };
      // More receives posted than the sender keeps in flight (perftest: rx-depth 512 against tx-depth 128):
      // with only tx_depth, a send that overtakes a repost finds none and waits out an RNR back-off.
      std::uint32_t depth =
          std::min(std::max(session.hello.tx_depth * 4, 512u), session.context->config().recv_queue_depth);
      if (auto ok = run_receiver(receivers, *session.recv_cq, depth, params.mode, target); !ok)
        return std::unexpected(ok.error());
      return std::optional<BandwidthSummary>{};
    }
    case Test::WriteBw:
    case Test::ReadBw:
      if (!run.bidirectional) return std::optional<BandwidthSummary>{};
      if (auto own = own_direction(params, session, run); !own)
        return std::unexpected(own.error());
      else
        return std::optional<BandwidthSummary>(*own);
    case Test::WriteLat: {
      std::uint64_t rounds = run.iterations ? run.warmup + run.iterations : 0;
      if (auto ok = write_pingpong_responder(make_end(session, run.size), plan, rounds, stop); !ok)
        return std::unexpected(ok.error());
      return std::optional<BandwidthSummary>{};
    }
    case Test::SendLat:
      if (auto ok = send_pingpong_responder(make_end(session, run.size), *session.send_cq, *session.recv_cq,
                                            plan, stop);
          !ok)
        return std::unexpected(ok.error());
      return std::optional<BandwidthSummary>{};
    default:
      return std::optional<BandwidthSummary>{};  // read_lat, atomic_lat: one-sided, nothing to do
  }
}

Result<void> serve_size(const Params& params, Session& session, const ControlMessage& begin,
                        std::vector<ReceiveLane>& receivers, bool first) {
  const SizeRun run{.test = params.test,
                    .bidirectional = session.hello.bidirectional != 0,
                    .size = begin.size,
                    .iterations = begin.count,
                    .warmup = begin.ops,
                    .duration = std::chrono::duration<double>(begin.seconds)};
  prepare_size(session, run.test, run.bidirectional, Role::Server, run.size);
  if (auto pushed = push_mirror(session); !pushed) return std::unexpected(pushed.error());
  for (std::size_t i = 0; i < receivers.size(); ++i)
    receivers[i].buffer = session.recv_segment(i, session.recv_capacity()), receivers[i].received = 0;
  // send_lat: each round reposts the receive it consumed, so one stays posted from size to size.
  if (run.test == Test::SendLat && first)
    if (auto id = session.data[0]->post_recv(session.recv_segment(0, session.recv_capacity())); !id)
      return std::unexpected(id.error());
  ControlMessage ready;
  ready.kind = MessageKind::Ready;
  if (auto ok = session.control->send(ready); !ok) return std::unexpected(ok.error());

  EndWatch watch{*session.control, std::nullopt, std::nullopt};
  auto own = serve(params, session, run, receivers, watch);
  ControlMessage verdict;
  verdict.kind = MessageKind::Verdict;
  if (!own) {
    verdict.ok = 0;
    verdict.set_text(own.error().describe());
    (void)session.control->send(verdict);
    return std::unexpected(own.error());
  }
  auto end = watch.wait();
  if (!end) return std::unexpected(end.error());
  if (auto ok = check_end(*end, begin); !ok) return ok;
  if (*own) verdict.ops = (*own)->ops, verdict.seconds = (*own)->seconds;
  if (begin.ok) {
    auto pulled = pull_mirror(session);
    std::string problem = pulled ? verify_size(session, run.test, run.bidirectional, Role::Server, run.size,
                                               end->count, std::max(run.warmup, run.iterations))
                                 : pulled.error().message();
    if (!problem.empty()) verdict.ok = 0, verdict.set_text(problem);
  }
  if (auto ok = session.control->send(verdict); !ok) return std::unexpected(ok.error());
  if (!verdict.ok)
    return fail(Errc::ProtocolError,
                "data check failed at " + std::to_string(run.size) + " bytes: " + verdict.get_text());
  return {};
}

}  // namespace

Result<void> run_server(const Params& params, std::shared_ptr<Context> context, Listener& listener) {
  auto session = accept_session(params, std::move(context), listener);
  if (!session) return std::unexpected(session.error());
  // send_bw keeps receives posted across sizes; they all land in the lane's receive area.
  std::vector<ReceiveLane> receivers;
  if (params.test == Test::SendBw)
    for (auto& connection : session->data) receivers.push_back(ReceiveLane{.connection = connection.get()});
  for (bool first = true;; first = false) {
    auto message = session->control->receive(std::chrono::minutes(10));
    if (!message) return std::unexpected(message.error());
    if (message->kind == MessageKind::End && message->size == 0) return {};  // the client is done
    if (message->kind != MessageKind::Begin)
      return fail(Errc::ProtocolError, "control channel: expected Begin");
    if (auto ok = check_begin(*message, session->hello); !ok) {
      ControlMessage verdict;  // tells the client why, in place of its Ready
      verdict.kind = MessageKind::Verdict;
      verdict.ok = 0;
      verdict.set_text(ok.error().message());
      (void)session->control->send(verdict);
      return ok;
    }
    if (auto ok = serve_size(params, *session, *message, receivers, first); !ok) return ok;
  }
}

}  // namespace rdmakit::perf
