#include "transport/fault/fault_connection.hpp"

#include "transport/fault/fault_context.hpp"

namespace rdmakit::fault {

FaultConnection::FaultConnection(std::shared_ptr<Connection> inner, std::shared_ptr<FaultCompletionQueue> send_cq,
                                 std::shared_ptr<FaultCompletionQueue> recv_cq, Injector& injector,
                                 std::chrono::milliseconds timeout)
    : Connection(inner->number(), send_cq, std::move(recv_cq)),
      link_(std::make_shared<Link>(std::move(inner), injector, timeout, make_id(1, false))) {
  send_cq->attach(link_);
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
