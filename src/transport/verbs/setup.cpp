// Connection set-up over rdma_cm, with our own QP and state transitions so that every link parameter
// comes from the handshake (handshake.hpp) rather than from defaults:
//   active:  resolve addr -> resolve route -> QP to INIT -> rdma_connect(Hello)
//            -> CONNECT_RESPONSE(peer Hello) -> negotiate -> RTR -> RTS -> rdma_establish
//   passive: CONNECT_REQUEST(peer Hello) -> negotiate -> QP to INIT -> RTR -> RTS -> rdma_accept(Hello)
//            -> ESTABLISHED
// A side that cannot agree rejects with its own Hello, so the other side names the same parameter.
#include <arpa/inet.h>
#include <sys/random.h>

#include <algorithm>

#include "transport/verbs/connection.hpp"
#include "transport/verbs/context.hpp"

namespace rdmakit::verbs_impl {
namespace {

using Clock = std::chrono::steady_clock;

std::uint32_t random_psn() {
  std::uint32_t psn = 0;
  if (getrandom(&psn, sizeof(psn), 0) != sizeof(psn))
    psn = static_cast<std::uint32_t>(Clock::now().time_since_epoch().count());
  return psn & 0xffffff;
}

Hello make_hello(const VerbsContext& context, std::uint32_t qpn) {
  const VerbsOptions& config = context.options();
  const Device& device = *context.device();
  Hello h;
  h.mtu_explicit = config.mtu.has_value();
  h.port_mtu = device.port_attr().active_mtu;
  h.mtu = h.mtu_explicit ? *mtu_from_bytes(*config.mtu) : h.port_mtu;
  h.context_id = context.identity().id;
  h.epoch = context.identity().epoch;
  h.gid = device.gid().gid;
  h.lid = device.port_attr().lid;
  h.qpn = qpn;
  h.psn = random_psn();
  AckTimeout ack = ack_timeout_for(context.config().timeout);
  h.timeout = ack.timeout;
  h.retry_cnt = ack.retry_cnt;
  h.rnr_timer = rnr_timer_for(context.config().rnr_timeout);
  h.max_rd_atomic = static_cast<std::uint8_t>(
      std::clamp(std::min(device.attr().max_qp_rd_atom, device.attr().max_qp_init_rd_atom), 1, 16));
  return h;
}

rdma_conn_param conn_param(const Hello::Bytes& bytes, const Hello& hello) {
  rdma_conn_param p{};
  p.private_data = bytes.data();
  p.private_data_len = static_cast<std::uint8_t>(bytes.size());
  p.responder_resources = hello.max_rd_atomic;
  p.initiator_depth = hello.max_rd_atomic;
  p.retry_count = hello.retry_cnt;
  p.rnr_retry_count = 6;
  p.qp_num = hello.qpn;
  return p;
}

// The id's device must be ours: rdma_cm picks the device that owns the address, our QP lives on ours.
Result<void> check_device(const VerbsContext& context, rdma_cm_id* id, const std::string& address) {
  const Device& device = *context.device();
  if (!id->verbs) return fail(Errc::Unavailable, address + ": rdma_cm found no RDMA device for this address");
  std::string found = device.api().get_device_name(id->verbs->device);
  if (found != device.name())
    return fail(Errc::InvalidArgument, address + " is reached through RDMA device " + found +
                                           ", but this context uses " + device.name() +
                                           " (option device, RDMAKIT_DEVICE)");
  return {};
}

// The peer's Hello, or the diagnostic: both sides run negotiate() on the same pair.
Result<std::pair<Hello, Negotiated>> agree(const Hello& local, std::span<const std::byte> private_data) {
  auto peer = Hello::decode(private_data);
  if (!peer) return std::unexpected(peer.error());
  auto agreed = negotiate(local, *peer);
  if (!agreed) return std::unexpected(agreed.error());
  return std::pair{*peer, *agreed};
}

Result<void> bring_up(const QueuePair& qp, const VerbsContext& context, const Hello& local, const Hello& peer,
                      const Negotiated& agreed) {
  QpPlan plan;
  plan.port = context.device()->port();
  plan.sgid_index = static_cast<std::uint8_t>(context.device()->gid().index);
  plan.local = local;
  plan.peer = peer;
  plan.agreed = agreed;
  plan.rnr_retry = rnr_retry_for(context.config().rnr_timeout, peer.rnr_timer);
  if (auto ok = qp.modify(rtr_transition(plan), "RTR"); !ok) return ok;
  return qp.modify(rts_transition(plan), "RTS");
}

// Turns a reject into the best diagnostic we can give.
Error rejected(const Hello& local, const CmEvent& event, const std::string& address) {
  auto peer = Hello::decode(event.private_data);
  if (peer && peer->rejected) {
    auto agreed = negotiate(local, *peer);
    if (!agreed) return agreed.error();
    return Error(Errc::ConnectionRefused, "connect to " + address + ": the peer rejected the handshake");
  }
  if (!peer && !event.private_data.empty() && event.private_data.size() >= 4 &&
      std::to_integer<int>(event.private_data[0]) == 0x52)
    return peer.error();
  return Error(Errc::ConnectionRefused, "connect to " + address +
                                            ": connection refused (nobody listens there? rdma_cm "
                                            "REJECTED, status " +
                                            std::to_string(event.status) + ")");
}

class VerbsListener final : public detail::ListenerProvider {
 public:
  VerbsListener(std::shared_ptr<VerbsContext> context, CmEndpoint endpoint, std::string address)
      : context_(std::move(context)), endpoint_(std::move(endpoint)), address_(std::move(address)) {}
  std::string address() const override { return address_; }
  Result<std::shared_ptr<Connection>> accept(std::chrono::milliseconds timeout,
                                             const ConnectOptions& options) override;

 private:
  Result<std::shared_ptr<Connection>> answer(CmEndpoint child, const CmEvent& request,
                                             const ConnectOptions& options);
  std::shared_ptr<VerbsContext> context_;
  CmEndpoint endpoint_;
  std::string address_;
};

Result<std::shared_ptr<Connection>> VerbsListener::accept(std::chrono::milliseconds timeout,
                                                          const ConnectOptions& options) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto event = endpoint_.next_event(deadline);
    if (!event) {
      if (event.error().code() == Errc::Timeout)
        return fail(Errc::Timeout, "accept on " + address_ + ": no peer connected in time");
      return std::unexpected(event.error());
    }
    if (event->type != RDMA_CM_EVENT_CONNECT_REQUEST) continue;  // nothing else concerns a listener
    auto child = CmEndpoint::adopt(context_->device()->api(), event->id);
    if (!child) return std::unexpected(child.error());
    return answer(std::move(*child), *event, options);
  }
}

Result<std::shared_ptr<Connection>> VerbsListener::answer(CmEndpoint child, const CmEvent& request,
                                                          const ConnectOptions& options) {
  const Api& api = context_->device()->api();
  const std::string peer_address =
      address_text(*reinterpret_cast<sockaddr_in*>(rdma_get_peer_addr(child.id())));
  const std::string what = "accept from " + peer_address;
  auto refuse = [&](const Hello& local, const Error& error) -> std::unexpected<Error> {
    Hello no = local;
    no.rejected = true;
    auto bytes = no.encode();
    api.reject(child.id(), bytes.data(), static_cast<std::uint8_t>(bytes.size()));
    return std::unexpected(Error(error.code(), what + ": " + error.message()));
  };
  if (auto ok = check_device(*context_, child.id(), peer_address); !ok)
    return refuse(make_hello(*context_, 1), ok.error());
  auto cqs = context_->cqs_for(options);
  if (!cqs) return refuse(make_hello(*context_, 1), cqs.error());
  auto qp = QueuePair::create(*context_->device(), context_->config(), context_->options().inline_size,
                              *cqs->first, *cqs->second);
  if (!qp) return refuse(make_hello(*context_, 1), qp.error());
  Hello local = make_hello(*context_, qp->get()->qp_num);
  auto agreed = agree(local, request.private_data);
  if (!agreed) return refuse(local, agreed.error());
  if (auto up = bring_up(*qp, *context_, local, agreed->first, agreed->second); !up)
    return refuse(local, up.error());
  auto bytes = local.encode();
  rdma_conn_param param = conn_param(bytes, local);
  if (api.accept(child.id(), &param) != 0) return fail_errno(what + ": rdma_accept", errno);
  const auto deadline = Clock::now() + context_->config().connect_timeout;
  auto established = child.next_event(deadline);
  if (!established) return std::unexpected(established.error());
  if (established->type == RDMA_CM_EVENT_REJECTED)
    return std::unexpected(rejected(local, *established, peer_address));
  if (established->type != RDMA_CM_EVENT_ESTABLISHED)
    return fail(Errc::ConnectionRefused, what + ": rdma_cm reported " +
                                             std::string(api.event_str(established->type)) +
                                             " instead of ESTABLISHED");
  auto number = context_->next_number();
  auto connection = std::make_shared<VerbsConnection>(
      VerbsConnection::Parts{context_, cqs->first, cqs->second, number, std::move(child), std::move(*qp),
                             agreed->first, peer_address});
  context_->track(connection);
  return connection;
}

}  // namespace

Result<std::shared_ptr<Connection>> connect_verbs(std::shared_ptr<VerbsContext> context,
                                                  std::string_view address, const ConnectOptions& options) {
  const Api& api = context->device()->api();
  const std::string what = "connect to " + std::string(address);
  auto destination = parse_address(address);
  if (!destination) return std::unexpected(destination.error());
  auto endpoint = CmEndpoint::create(api);
  if (!endpoint) return std::unexpected(endpoint.error());
  const auto deadline = Clock::now() + context->config().connect_timeout;
  const int step_ms = static_cast<int>(std::max<std::int64_t>(1, context->config().connect_timeout.count()));

  // From our device's own address, so that rdma_cm resolves through our device (and our netdev).
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl(context->device_ipv4());
  if (api.resolve_addr(endpoint->id(),
                       source.sin_addr.s_addr ? reinterpret_cast<sockaddr*>(&source) : nullptr,
                       reinterpret_cast<sockaddr*>(&*destination), step_ms) != 0)
    return fail_errno(what + ": rdma_resolve_addr", errno);
  if (auto ev = endpoint->expect(RDMA_CM_EVENT_ADDR_RESOLVED, deadline,
                                 what + " (address resolution: is the peer's "
                                        "address reachable from this device?)");
      !ev)
    return std::unexpected(ev.error());
  if (auto ok = check_device(*context, endpoint->id(), std::string(address)); !ok)
    return std::unexpected(ok.error());
  if (api.resolve_route(endpoint->id(), step_ms) != 0)
    return fail_errno(what + ": rdma_resolve_route", errno);
  if (auto ev = endpoint->expect(RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, what + " (route resolution)"); !ev)
    return std::unexpected(ev.error());

  auto cqs = context->cqs_for(options);
  if (!cqs) return std::unexpected(cqs.error());
  auto qp = QueuePair::create(*context->device(), context->config(), context->options().inline_size,
                              *cqs->first, *cqs->second);
  if (!qp) return std::unexpected(qp.error());
  Hello local = make_hello(*context, qp->get()->qp_num);
  auto bytes = local.encode();
  rdma_conn_param param = conn_param(bytes, local);
  if (api.connect(endpoint->id(), &param) != 0) return fail_errno(what + ": rdma_connect", errno);

  auto response = endpoint->next_event(deadline);
  if (!response) {
    if (response.error().code() == Errc::Timeout)
      return fail(Errc::Timeout, what + ": no answer within connect_timeout_ms (peer unreachable?)");
    return std::unexpected(response.error());
  }
  if (response->type == RDMA_CM_EVENT_REJECTED)
    return std::unexpected(rejected(local, *response, std::string(address)));
  if (response->type != RDMA_CM_EVENT_CONNECT_RESPONSE)
    return fail(Errc::ConnectionRefused, what + ": rdma_cm reported " +
                                             std::string(api.event_str(response->type)) + " (status " +
                                             std::to_string(response->status) + ")");
  auto agreed = agree(local, response->private_data);
  Result<void> up = agreed ? bring_up(*qp, *context, local, agreed->first, agreed->second)
                           : Result<void>(std::unexpected(agreed.error()));
  if (!up) {
    Hello no = local;
    no.rejected = true;
    auto reject_bytes = no.encode();
    api.reject(endpoint->id(), reject_bytes.data(), static_cast<std::uint8_t>(reject_bytes.size()));
    return fail(up.error().code(), what + ": " + up.error().message());
  }
  if (api.establish(endpoint->id()) != 0) return fail_errno(what + ": rdma_establish", errno);
  auto number = context->next_number();
  auto connection = std::make_shared<VerbsConnection>(
      VerbsConnection::Parts{context, cqs->first, cqs->second, number, std::move(*endpoint), std::move(*qp),
                             agreed->first, address_text(*destination)});
  context->track(connection);
  return connection;
}

Result<std::shared_ptr<Listener>> listen_verbs(std::shared_ptr<VerbsContext> context,
                                               std::string_view address) {
  const Api& api = context->device()->api();
  auto bind_to = parse_address(address);
  if (!bind_to) return std::unexpected(bind_to.error());
  // Loopback (the default listen_address) has no RDMA device: on verbs it means this device's address.
  if (ntohl(bind_to->sin_addr.s_addr) >> 24 == 127 || bind_to->sin_addr.s_addr == 0) {
    if (!context->device_ipv4())
      return fail(Errc::InvalidArgument,
                  "listen on " + std::string(address) + ": " + context->device()->name() +
                      " has no IPv4 address; give listen() one of its netdev's addresses");
    bind_to->sin_addr.s_addr = htonl(context->device_ipv4());
  }
  auto endpoint = CmEndpoint::create(api);
  if (!endpoint) return std::unexpected(endpoint.error());
  if (api.bind_addr(endpoint->id(), reinterpret_cast<sockaddr*>(&*bind_to)) != 0)
    return fail_errno("listen: rdma_bind_addr(" + address_text(*bind_to) +
                          ") (is it an address of an RDMA device's netdev?)",
                      errno);
  if (auto ok = check_device(*context, endpoint->id(), address_text(*bind_to)); !ok)
    return std::unexpected(ok.error());
  if (api.listen(endpoint->id(), 128) != 0)
    return fail_errno("rdma_listen(" + address_text(*bind_to) + ")", errno);
  bind_to->sin_port = api.get_src_port(endpoint->id());
  std::string bound = address_text(*bind_to);
  return std::make_shared<VerbsListener>(std::move(context), std::move(*endpoint), bound);
}

}  // namespace rdmakit::verbs_impl
