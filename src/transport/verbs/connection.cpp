#include "transport/verbs/connection.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "core/rc_state.hpp"
#include "transport/verbs/context.hpp"

namespace rdmakit::verbs_impl {

Result<QueuePair> QueuePair::create(const Device& device, const Config& config, std::uint32_t inline_size,
                                    VerbsCompletionQueue& send_cq, VerbsCompletionQueue& recv_cq) {
  const ibv_device_attr& limits = device.attr();
  ibv_qp_init_attr init{};
  init.send_cq = send_cq.cq();
  init.recv_cq = recv_cq.cq();
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;  // selective signaling: WorkRequest::signaled decides
  init.cap.max_send_wr =
      std::min<std::uint32_t>(config.send_queue_depth, static_cast<std::uint32_t>(limits.max_qp_wr));
  init.cap.max_recv_wr =
      std::min<std::uint32_t>(config.recv_queue_depth, static_cast<std::uint32_t>(limits.max_qp_wr));
  init.cap.max_send_sge = std::min<std::uint32_t>(config.max_sge, static_cast<std::uint32_t>(limits.max_sge));
  init.cap.max_recv_sge = init.cap.max_send_sge;
  init.cap.max_inline_data = inline_size;
  ibv_qp* qp = device.api().create_qp(device.pd(), &init);
  if (!qp)
    return fail(Errc::ResourceExhausted,
                "ibv_create_qp(" + device.name() + ", send " + std::to_string(init.cap.max_send_wr) + " x " +
                    std::to_string(init.cap.max_send_sge) + " sge, inline " + std::to_string(inline_size) +
                    "): " + std::strerror(errno) + " (lower send_queue_depth, max_sge or inline_size)");
  // The provider may grant more inline room than asked; the caller's limit is what we use.
  QueuePair owned(device.api(), qp, std::min(init.cap.max_inline_data, inline_size));
  if (auto ok = owned.modify(init_transition(device.port()), "INIT"); !ok) return std::unexpected(ok.error());
  return owned;
}

QueuePair::~QueuePair() {
  if (qp_) api_->destroy_qp(qp_);
}

Result<void> QueuePair::modify(const QpTransition& transition, const char* what) const {
  ibv_qp_attr attr = transition.attr;
  // ibv_modify_qp returns the error number itself (not through errno).
  if (int rc = api_->modify_qp(qp_, &attr, transition.mask); rc != 0)
    return fail_errno(std::string("ibv_modify_qp(") + what + ")", rc > 0 ? rc : errno);
  return {};
}

VerbsConnection::VerbsConnection(Parts parts)
    : ConnectionProvider(
          parts.number, parts.send_cq, parts.recv_cq,
          std::make_shared<detail::RcState>(parts.number, parts.context->config().send_queue_depth,
                                            parts.context->config().recv_queue_depth),
          detail::Admission::Device, parts.context->capabilities(), parts.peer.epoch),
      context_(std::move(parts.context)),
      send_cq_(std::move(parts.send_cq)),
      recv_cq_(std::move(parts.recv_cq)),
      track_(rc_ptr()),
      endpoint_(std::move(parts.endpoint)),
      qp_(std::move(parts.qp)),
      peer_(parts.peer),
      peer_address_(std::move(parts.peer_address)),
      inline_size_(qp_->max_inline()) {
  send_cq_->attach_track(track_);
  if (recv_cq_ != send_cq_) recv_cq_->attach_track(track_);
}

VerbsConnection::~VerbsConnection() { close(); }

void VerbsConnection::close() {
  std::lock_guard lock(close_mutex_);
  if (closed_.exchange(true)) return;
  track_->close();
  context_->monitor().unwatch(endpoint_.fd());
  track_->fail(
      Error(Errc::ConnectionBroken, "connection " + std::to_string(number()) + " was closed by this side"));
  if (qp_) {
    // ERR flushes everything posted (as Flushed completions, unsignaled ones included); wait for them
    // to reach the CQs' backlogs before the QP goes, so pollers still see them.
    (void)qp_->modify(error_transition(), "ERR");
    context_->device()->api().disconnect(endpoint_.id());
    auto deadline = std::chrono::steady_clock::now() +
                    std::min<std::chrono::milliseconds>(context_->config().timeout, std::chrono::seconds(2));
    send_cq_->drain(*track_, deadline);
    if (recv_cq_ != send_cq_) recv_cq_->drain(*track_, deadline);
    if (track_->outstanding() > 0)
      log::info("verbs", "connection " + std::to_string(number()) + " closed with " +
                             std::to_string(track_->outstanding()) + " operations not flushed in time");
    qp_.reset();
  }
  send_cq_->detach_track(track_.get());
  if (recv_cq_ != send_cq_) recv_cq_->detach_track(track_.get());
}

void VerbsConnection::on_cm_readable() {
  std::lock_guard lock(close_mutex_);
  if (closed_.load()) return;
  auto event = endpoint_.next_event(std::chrono::steady_clock::now());
  if (!event || event->type != RDMA_CM_EVENT_DISCONNECTED) return;
  track_->fail(Error(Errc::ConnectionBroken,
                     "the peer " + peer_address_ + " closed the connection (rdma_cm DISCONNECTED)"));
  if (qp_) (void)qp_->modify(error_transition(), "ERR");
}

PeerInfo VerbsConnection::peer() const {
  return PeerInfo{.name = "", .id = peer_.context_id, .epoch = peer_.epoch, .address = peer_address_};
}

ConnectionStats VerbsConnection::stats() const { return track_->stats(peer()); }

Result<void> VerbsConnection::health() const { return track_->health(); }

}  // namespace rdmakit::verbs_impl
