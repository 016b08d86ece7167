#include "transport/fault/fault_connection.hpp"

#include "transport/fault/fault_context.hpp"

namespace rdmakit::fault {

FaultConnection::FaultConnection(std::shared_ptr<Connection> inner,
                                 std::shared_ptr<FaultCompletionQueue> send_cq,
                                 std::shared_ptr<FaultCompletionQueue> recv_cq, const Config& config,
                                 Capabilities caps, Injector& injector)
    : ConnectionProvider(inner->number(), send_cq, recv_cq,
                         std::make_shared<detail::RcState>(inner->number(), config.send_queue_depth,
                                                           config.recv_queue_depth),
                         detail::Admission::Wrapper, std::move(caps), inner->peer().epoch),
      link_(std::make_shared<Link>(std::move(inner), rc_ptr(), injector, config.timeout)),
      recv_queue_(std::move(recv_cq)) {
  send_cq->attach_link(link_);
  recv_queue_->attach_receiver(rc_ptr());
}

Result<std::uint64_t> FaultConnection::post_recv_admitted(std::span<const Segment> sgl, std::uint64_t,
                                                          std::unique_lock<std::mutex>&) {
  std::optional<Completion> flushed;
  auto id = link_->post_recv(sgl, flushed);
  if (flushed) recv_queue_->add(*flushed);
  return id;
}

Result<std::shared_ptr<Connection>> FaultListener::accept(std::chrono::milliseconds timeout,
                                                          const ConnectOptions& options) {
  auto queues = context_->queues_for(options);
  if (!queues) return std::unexpected(queues.error());
  auto inner = inner_->accept(timeout, queues->inner);
  if (!inner) return inner;
  return context_->wrap(std::move(*inner), *queues);
}

}  // namespace rdmakit::fault
