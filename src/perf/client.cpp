// The client (driving) side of a run.
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

Opcode bandwidth_opcode(Test test) {
  return test == Test::ReadBw ? Opcode::Read : test == Test::SendBw ? Opcode::Send : Opcode::Write;
}

RunInfo describe(const Params& params, const Context& context) {
  RunInfo info;
  info.test = std::string(to_string(params.test));
  info.transport = std::string(context.transport());
  info.mode = params.test == Test::WriteLat ? "poll (memory)" : std::string(to_string(params.mode));
  info.threads = "1 application thread per side";
  if (auto threads = context.capabilities().progress_threads)
    info.threads += " + " + std::to_string(threads) + " " + info.transport + " progress thread" +
                    (threads > 1 ? "s" : "") + " per side";
  info.connections = params.connections;
  info.tx_depth = params.tx_depth;
  info.cq_mod = params.cq_mod;
  info.bidirectional = params.bidirectional;
  info.verify = params.verify;
  info.working_set = params.working_set;
  return info;
}

std::vector<Lane> make_lanes(const Session& session, const Params& params, std::uint64_t size) {
  std::vector<Lane> lanes(session.data.size());
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    lanes[i].connection = session.data[i].get();
    lanes[i].local = session.send_segment(i, size);
    lanes[i].remote = session.remote_address(i);
    // The send area and the peer's receive area are each recv_capacity() >= working_set bytes long.
    lanes[i].positions = positions_per_lane(params.working_set, size);
    lanes[i].stride = size;
  }
  return lanes;
}

PingPongEnd make_end(const Session& session, std::uint64_t size) {
  return PingPongEnd{.connection = session.data[0].get(),
                     .local = session.recv_area(0),
                     .local_segment = session.recv_segment(0, session.recv_capacity()),
                     .segment = session.send_segment(0, size),
                     .remote = session.remote_address(0)};
}

std::optional<Clock::time_point> deadline(const Params& params) {
  if (params.duration.count() == 0) return std::nullopt;
  return Clock::now() + params.duration;
}

// Runs one size; fills the row's figures and returns the operations posted over all connections
// (bandwidth) or the rounds run (latency), warm-up included.
Result<std::uint64_t> measure(const Params& params, Session& session, std::uint64_t size, Row& row) {
  const std::uint64_t iterations = params.duration.count() ? 0 : effective_iterations(params);
  const std::uint64_t warmup = effective_warmup(params);
  if (is_bandwidth(params.test)) {
    auto lanes = make_lanes(session, params, size);
    BandwidthPlan plan{.opcode = bandwidth_opcode(params.test),
                       .ops_per_lane = warmup,
                       .until = std::nullopt,
                       .depth = params.tx_depth,
                       .cq_mod = params.cq_mod,
                       .post_list = params.post_list,
                       .mode = params.mode};
    if (warmup)
      if (auto w = run_bandwidth(lanes, *session.send_cq, plan); !w) return std::unexpected(w.error());
    plan.ops_per_lane = iterations;
    plan.until = deadline(params);
    auto marks = run_bandwidth(lanes, *session.send_cq, plan);
    if (!marks) return std::unexpected(marks.error());
    row.bandwidth = summarize_bandwidth(size, *marks);
    row.iterations = row.bandwidth->ops;
    std::uint64_t total = 0;  // over all lanes, warm-up included: what the send_bw receiver waits for
    for (const Lane& lane : lanes) total += warmup + lane.posted;
    return total;
  }
  LatencyPlan plan{.size = size,
                   .warmup = warmup,
                   .iterations = iterations,
                   .duration = params.duration,
                   .mode = params.mode};
  PingPongEnd end = make_end(session, size);
  std::uint64_t done = 0;
  Result<std::vector<double>> samples;
  switch (params.test) {
    case Test::WriteLat:
      samples = write_pingpong_initiator(end, plan, &done);
      break;
    case Test::SendLat:
      samples = send_pingpong_initiator(end, *session.send_cq, *session.recv_cq, plan, &done);
      break;
    case Test::ReadLat:
      samples = read_latency(end, *session.send_cq, plan, &done);
      break;
    default:
      samples = atomic_latency(end, *session.send_cq, plan, &done);
      break;
  }
  if (!samples) return std::unexpected(samples.error());
  row.iterations = samples->size();
  row.latency = summarize_latency(*samples);
  return done;
}

Result<Row> run_size(const Params& params, Session& session, std::uint64_t size) {
  prepare_size(session, params.test, params.bidirectional, Role::Client, size);
  if (auto pushed = push_mirror(session); !pushed) return std::unexpected(pushed.error());
  // send_lat: each round reposts the receive it consumed, so one stays posted from size to size.
  if (params.test == Test::SendLat && size == params.sizes.front())
    if (auto id = session.data[0]->post_recv(session.recv_segment(0, session.recv_capacity())); !id)
      return std::unexpected(id.error());
  ControlMessage begin;
  begin.kind = MessageKind::Begin;
  begin.size = size;
  begin.count = params.duration.count() ? 0 : effective_iterations(params);
  begin.ops = effective_warmup(params);
  begin.seconds = std::chrono::duration<double>(params.duration).count();
  begin.ok = params.verify;
  if (auto ok = session.control->send(begin); !ok) return std::unexpected(ok.error());
  if (auto ready = session.control->expect(MessageKind::Ready, 60s); !ready)
    return std::unexpected(ready.error());

  Row row;
  row.bytes = size;
  auto count = measure(params, session, size, row);
  if (!count) return std::unexpected(count.error());
  ControlMessage end;
  end.kind = MessageKind::End;
  end.size = size;
  end.count = *count;
  if (auto ok = session.control->send(end); !ok) return std::unexpected(ok.error());
  auto verdict = session.control->expect(MessageKind::Verdict, 120s);
  if (!verdict) return std::unexpected(verdict.error());
  if (!verdict->ok) return fail(Errc::ProtocolError, "server: " + verdict->get_text());
  if (auto ok = check_verdict(*verdict); !ok) return std::unexpected(ok.error());
  if (params.bidirectional)
    row.peer_bandwidth = summarize_bandwidth(
        size, std::vector<Mark>{{verdict->ops, static_cast<std::int64_t>(verdict->seconds * 1e9)}});
  if (params.verify) {
    if (auto pulled = pull_mirror(session); !pulled) return std::unexpected(pulled.error());
    // The warm-up and the timed run each walk from the first position.
    const std::uint64_t per_lane =
        std::max(effective_warmup(params), params.duration.count() ? 0 : effective_iterations(params));
    std::string problem =
        verify_size(session, params.test, params.bidirectional, Role::Client, size, *count, per_lane);
    if (!problem.empty())
      return fail(Errc::ProtocolError, "data check failed at " + std::to_string(size) + " bytes: " + problem);
    row.verified = true;
  }
  return row;
}

}  // namespace

Result<Report> run_client(const Params& params, std::shared_ptr<Context> context, const RowSink& on_row) {
  auto session = connect_session(params, std::move(context));
  if (!session) return std::unexpected(session.error());
  Report report;
  report.info = describe(params, *session->context);
  if (session->local->kind() != MemoryKind::Host)
    report.info.memory = to_string(session->local->kind()) + " (" + to_string(session->local->path()) + ")";
  for (std::uint64_t size : params.sizes) {
    auto row = run_size(params, *session, size);
    if (!row) return std::unexpected(row.error());
    report.rows.push_back(*row);
    if (on_row) on_row(report.info, *row);
  }
  ControlMessage bye;
  bye.kind = MessageKind::End;
  bye.size = 0;  // End with no Begin: the run is over
  if (auto ok = session->control->send(bye); !ok) return std::unexpected(ok.error());
  return report;
}

}  // namespace rdmakit::perf
