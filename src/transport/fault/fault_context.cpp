#include "transport/fault/fault_context.hpp"

#include <thread>

#include "transport/fault/fault_connection.hpp"
#include "transport/fault/rule_book.hpp"
#include "transport/transport.hpp"

namespace rdmakit::fault {

Result<std::shared_ptr<CompletionQueue>> FaultContext::create_cq(std::size_t depth) {
  auto inner = inner_->create_cq(depth);
  if (!inner) return inner;
  return std::make_shared<FaultCompletionQueue>(std::move(*inner), config().wait_mode, config().spin);
}

Result<std::shared_ptr<Listener>> FaultContext::listen(std::string_view address) {
  auto inner = inner_->listen(address);
  if (!inner) return inner;
  return std::make_shared<FaultListener>(std::static_pointer_cast<FaultContext>(shared_from_this()),
                                         std::move(*inner));
}

Result<std::optional<Rule>> FaultContext::connect_rule() {
  auto rule = detail::FaultRuleBook::of(injector_).match(std::nullopt, 0);
  if (!rule) return rule;
  switch (rule->action) {
    case Rule::Action::Fail:
      return fail(Errc::ConnectionRefused, "fault: injected connection refusal");
    case Rule::Action::Delay:
      std::this_thread::sleep_for(rule->delay);
      break;
    case Rule::Action::Drop:
      // The handshake vanishes on the wire, so the attempt runs into its time limit.
      std::this_thread::sleep_for(config().connect_timeout);
      return fail(Errc::Timeout,
                  "fault: injected drop of the connection attempt (connect_timeout_ms passed)");
    case Rule::Action::Disconnect:
      break;
  }
  return rule;
}

Result<std::shared_ptr<Connection>> FaultContext::connect(std::string_view address,
                                                          const ConnectOptions& options) {
  auto rule = connect_rule();
  if (!rule) return std::unexpected(rule.error());
  auto queues = queues_for(options);
  if (!queues) return std::unexpected(queues.error());
  auto inner = inner_->connect(address, queues->inner);
  if (!inner) return inner;
  auto connection = wrap(std::move(*inner), *queues);
  if (*rule && (*rule)->action == Rule::Action::Disconnect)
    static_cast<FaultConnection&>(*connection).link()->sever("fault: injected disconnect at connect");
  return connection;
}

Result<std::shared_ptr<FaultCompletionQueue>> FaultContext::own_queue(
    const std::shared_ptr<CompletionQueue>& given, const char* which, std::uint32_t depth) {
  if (!given) {
    auto made = create_cq(depth);  // a connection's own queue: its queue depth, as on verbs
    if (!made) return std::unexpected(made.error());
    return std::static_pointer_cast<FaultCompletionQueue>(std::move(*made));
  }
  auto own = std::dynamic_pointer_cast<FaultCompletionQueue>(given);
  if (!own)
    return fail(Errc::InvalidArgument, std::string("ConnectOptions::") + which +
                                           " was not created by a fault context's create_cq()");
  return own;
}

Result<FaultContext::Queues> FaultContext::queues_for(const ConnectOptions& options) {
  auto send = own_queue(options.send_cq, "send_cq", config().send_queue_depth);
  if (!send) return std::unexpected(send.error());
  auto recv = own_queue(options.recv_cq, "recv_cq", config().recv_queue_depth);
  if (!recv) return std::unexpected(recv.error());
  return Queues{*send, *recv, ConnectOptions{(*send)->inner(), (*recv)->inner()}};
}

std::shared_ptr<Connection> FaultContext::wrap(std::shared_ptr<Connection> inner, const Queues& queues) {
  auto connection = std::make_shared<FaultConnection>(std::move(inner), queues.send, queues.recv, config(),
                                                      capabilities(), injector_);
  std::lock_guard lock(mutex_);
  std::erase_if(connections_, [](const std::weak_ptr<Connection>& weak) { return weak.expired(); });
  connections_.push_back(connection);
  return connection;
}

std::vector<ConnectionStats> FaultContext::diagnostics() const {
  std::vector<ConnectionStats> all;
  std::lock_guard lock(mutex_);
  for (const auto& weak : connections_)
    if (auto connection = weak.lock()) all.push_back(connection->stats());
  return all;
}

Injector* injector(Context& context) noexcept {
  auto* fault = dynamic_cast<FaultContext*>(&context);
  return fault ? &fault->injector() : nullptr;
}

}  // namespace rdmakit::fault

namespace rdmakit::transport {

namespace {
// "fault:<inner>": opens <inner> through the registry, then wraps it.
Result<std::shared_ptr<Context>> open_fault(const Config& config) {
  Config inner_config = config;
  inner_config.transport = config.transport.substr(config.transport.find(':') + 1);
  auto inner = transport::open(inner_config);
  if (!inner) return inner;
  return std::make_shared<fault::FaultContext>(config, std::move(*inner));
}
}  // namespace

Registration fault_registration() {
  return {.name = "fault",
          .summary = "wraps another transport and fails, delays or drops its operations on command (tests)",
          .wraps_inner = true,
          .open = open_fault};
}

}  // namespace rdmakit::transport
