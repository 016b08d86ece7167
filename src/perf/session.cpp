#include "perf/session.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "bootstrap/auth.hpp"
#include "bootstrap/peer_proof.hpp"
#include "core/log.hpp"
#include "core/net.hpp"
#include "cuda/runtime.hpp"

namespace rdmakit::perf {
namespace {

using namespace std::chrono_literals;
constexpr Access kDataAccess =
    Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic;
constexpr auto kAcceptTimeout = std::chrono::milliseconds(std::chrono::minutes(10));
constexpr std::string_view kProofLabel = "rdmakit-perf/v1";  // a proof for another service is none here
constexpr auto kProofTimeout = std::chrono::milliseconds(10000);

// A connection from a client that proved the secret; strangers' connections are closed (by the proof) and
// the next one is taken, until `timeout`.
Result<std::shared_ptr<Connection>> accept_proven(
    Context& context, Listener& listener, const bootstrap::PeerProofConfig& proof,
    std::chrono::milliseconds timeout, const ConnectOptions& options,
    const std::function<Result<void>(const std::shared_ptr<Connection>&)>& before_accept) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto connection = listener.accept(std::max(left, std::chrono::milliseconds(1)), options);
    if (!connection) return std::unexpected(connection.error());
    auto proven = bootstrap::prove_accept(
        context, **connection, proof, "rdmakit-perf server",
        [&](std::string_view) { return before_accept ? before_accept(*connection) : Result<void>(); });
    if (proven) return connection;
    log::warn("perf",
              "refused a client at " + (*connection)->peer().address + ": " + proven.error().message());
  }
}

bool needs_two_areas(Test test, bool bidirectional) { return bidirectional || !is_bandwidth(test); }

Result<void> make_cqs(Session& session) {
  auto send_cq = session.context->create_cq();
  if (!send_cq) return std::unexpected(send_cq.error());
  auto recv_cq = session.context->create_cq();
  if (!recv_cq) return std::unexpected(recv_cq.error());
  session.send_cq = std::move(*send_cq);
  session.recv_cq = std::move(*recv_cq);
  return {};
}

Result<void> allocate_slots(Session& session, std::uint32_t connections, std::uint64_t largest,
                            bool two_areas, MemoryKind memory) {
  // Both sides compute the same layout from the same Hello, so lane offsets agree.
  auto layout = plan_layout(connections, largest, two_areas);
  if (!layout) return std::unexpected(layout.error());
  session.send_offset = layout->send_offset;
  session.slot_bytes = layout->slot_bytes;
  auto allocated = session.context->allocate(layout->total, kDataAccess, memory);
  if (!allocated) return std::unexpected(allocated.error());
  session.local = std::move(*allocated);
  if (session.local->kind() == MemoryKind::Cuda) session.mirror.assign(session.local->size(), 0);
  return {};
}

Result<void> take_remote(Session& session, const ControlMessage& message) {
  auto remote = RemoteRegion::deserialize(std::as_bytes(std::span(message.region)));
  if (!remote) return std::unexpected(remote.error());
  session.remote = *remote;
  return {};
}

void put_region(ControlMessage& message, const MemoryRegion& region) {
  auto bytes = region.descriptor().serialize();
  std::memcpy(message.region, bytes.data(), bytes.size());
}

Result<void> copy_mirror(const Session& session, bool to_device) {
  if (session.mirror.empty()) return {};
  auto runtime = detail::cuda::Runtime::get();
  if (!runtime) return std::unexpected(runtime.error());
  void* device = session.local->data();
  void* host = session.mirror.data();
  auto e = (*runtime)->memcpy(to_device ? device : host, to_device ? host : device, session.mirror.size(),
                              detail::cuda::kDefault);
  if (e != detail::cuda::kSuccess)
    return fail(Errc::TransportFailure, "rdmakit-perf: " + (*runtime)->describe("cudaMemcpy", e));
  return {};
}

}  // namespace

Result<void> push_mirror(const Session& session) { return copy_mirror(session, true); }
Result<void> pull_mirror(const Session& session) { return copy_mirror(session, false); }

Result<bootstrap::PeerProofConfig> proof_config(const std::string& address, const Capabilities& caps) {
  std::string host = "localhost";  // an endpoint name (shm) is on this machine
  if (caps.address_prefix.empty()) {
    auto parsed = net::parse_host_port(address);
    if (!parsed) return std::unexpected(parsed.error());
    host = parsed->host.empty() ? "0.0.0.0" : parsed->host;
  }
  auto secret = bootstrap::auth::service_secret(host, "the rdmakit-perf server");
  if (!secret) return std::unexpected(secret.error());
  return bootstrap::PeerProofConfig{
      .secret = std::move(*secret), .label = std::string(kProofLabel), .timeout = kProofTimeout};
}

std::string endpoint(const std::string& address, std::uint16_t port, const Capabilities& caps) {
  // Transports that name their endpoints (shm) get one made of the port, so both sides agree on it.
  const std::string& prefix = caps.address_prefix;
  if (!prefix.empty())
    return address.starts_with(prefix) ? address : prefix + "rdmakit-perf-" + std::to_string(port);
  if (address.find(':') != std::string::npos) return address;
  return address + ":" + std::to_string(port);
}

Result<std::shared_ptr<Context>> open_context(const Params& params) {
  Options options;
  if (!params.transport.empty()) options.transport = params.transport;
  if (!params.device.empty()) options.set("device", params.device);
  options.wait_mode = params.mode == CompletionMode::Poll ? WaitMode::Spin : WaitMode::Block;
  // Deep windows across many connections: room for every outstanding operation and completion.
  std::uint32_t depth = std::max<std::uint32_t>(params.tx_depth * 2, 1024);
  options.send_queue_depth = depth;
  options.recv_queue_depth = depth;
  options.cq_depth = std::max<std::uint32_t>(depth * params.connections, 4096);
  return Context::open(options);
}

Result<Session> connect_session(const Params& params, std::shared_ptr<Context> context) {
  Session session;
  session.context = std::move(context);
  const std::string address = endpoint(params.server, params.port, session.context->capabilities());
  auto proof = proof_config(address, session.context->capabilities());
  if (!proof) return std::unexpected(proof.error());
  auto control = session.context->connect(address);
  if (!control) return std::unexpected(control.error());
  if (auto proven = bootstrap::prove_initiate(*session.context, **control, *proof, "rdmakit-perf client");
      !proven)
    return std::unexpected(proven.error());
  session.control_connection = *control;
  auto channel = ControlChannel::open(*session.context, *control);
  if (!channel) return std::unexpected(channel.error());
  session.control.emplace(std::move(*channel));
  if (auto ok = allocate_slots(session, params.connections, max_size(params),
                               needs_two_areas(params.test, params.bidirectional), params.memory);
      !ok)
    return std::unexpected(ok.error());

  ControlMessage& hello = session.hello;
  hello.kind = MessageKind::Hello;
  hello.test = static_cast<std::uint8_t>(params.test);
  hello.bidirectional = params.bidirectional;
  hello.connections = params.connections;
  hello.tx_depth = params.tx_depth;
  hello.size = max_size(params);
  hello.ops = params.working_set;
  session.working_set = params.working_set;
  put_region(hello, *session.local);
  if (auto ok = session.control->send(hello); !ok) return std::unexpected(ok.error());

  if (auto ok = make_cqs(session); !ok) return std::unexpected(ok.error());
  for (std::uint32_t i = 0; i < params.connections; ++i) {
    auto connection =
        session.context->connect(address, {.send_cq = session.send_cq, .recv_cq = session.recv_cq});
    if (!connection) return std::unexpected(connection.error());
    if (auto proven =
            bootstrap::prove_initiate(*session.context, **connection, *proof, "rdmakit-perf client");
        !proven)
      return std::unexpected(proven.error());
    session.data.push_back(std::move(*connection));
  }
  auto welcome = session.control->expect(MessageKind::Welcome, 30s);
  if (!welcome) return std::unexpected(welcome.error());
  if (!welcome->ok) return fail(Errc::ConnectionRefused, "server refused the run: " + welcome->get_text());
  // The server's buffer must hold the layout the Hello described, or our lane offsets point past it.
  auto layout =
      plan_layout(params.connections, max_size(params), needs_two_areas(params.test, params.bidirectional));
  if (!layout) return std::unexpected(layout.error());
  if (auto ok = take_remote(session, *welcome); !ok) return std::unexpected(ok.error());
  if (session.remote.length < layout->total)
    return fail(Errc::ProtocolError, "server's buffer is " + std::to_string(session.remote.length) +
                                         " bytes, smaller than the run's " + std::to_string(layout->total));
  return session;
}

Result<Session> accept_session(const Params& params, std::shared_ptr<Context> context, Listener& listener) {
  Session session;
  session.context = std::move(context);
  auto proof = proof_config(listener.address(), session.context->capabilities());
  if (!proof) return std::unexpected(proof.error());
  // The control channel's receive is posted before the proof's last message, so the client's Hello,
  // sent right after it, finds one.
  auto control = accept_proven(*session.context, listener, *proof, kAcceptTimeout, {},
                               [&](const std::shared_ptr<Connection>& connection) {
                                 auto channel = ControlChannel::open(*session.context, connection);
                                 if (!channel) return Result<void>(std::unexpected(channel.error()));
                                 session.control.emplace(std::move(*channel));
                                 return Result<void>();
                               });
  if (!control) return std::unexpected(control.error());
  session.control_connection = *control;
  auto hello = session.control->expect(MessageKind::Hello, 30s);
  if (!hello) return std::unexpected(hello.error());
  // The Hello sizes this side's buffers and counts its connections: checked before anything is made of it.
  if (auto ok = check_hello(*hello); !ok) {
    ControlMessage refusal;
    refusal.kind = MessageKind::Welcome;
    refusal.ok = 0;
    refusal.set_text(ok.error().message());
    (void)session.control->send(refusal);
    return std::unexpected(ok.error());
  }
  session.hello = *hello;
  session.working_set = hello->ops;
  if (auto ok = take_remote(session, *hello); !ok) return std::unexpected(ok.error());

  if (auto ok = make_cqs(session); !ok) return std::unexpected(ok.error());
  for (std::uint32_t i = 0; i < hello->connections; ++i) {
    auto connection = accept_proven(*session.context, listener, *proof, 30s,
                                    {.send_cq = session.send_cq, .recv_cq = session.recv_cq}, {});
    if (!connection) return std::unexpected(connection.error());
    session.data.push_back(std::move(*connection));
  }
  ControlMessage welcome;
  welcome.kind = MessageKind::Welcome;
  if (hello->test != static_cast<std::uint8_t>(params.test)) {
    welcome.ok = 0;
    welcome.set_text("the server runs " + std::string(to_string(params.test)) +
                     ", the client asked for another test");
    (void)session.control->send(welcome);
    return fail(Errc::InvalidArgument,
                "the client asked for a different test than " + std::string(to_string(params.test)));
  }
  if (auto ok = allocate_slots(session, hello->connections, hello->size,
                               needs_two_areas(static_cast<Test>(hello->test), hello->bidirectional != 0),
                               params.memory);
      !ok)
    return std::unexpected(ok.error());
  put_region(welcome, *session.local);
  if (auto ok = session.control->send(welcome); !ok) return std::unexpected(ok.error());
  return session;
}

}  // namespace rdmakit::perf
