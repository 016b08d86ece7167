#include "transport/tcp/context.hpp"

#include <thread>

#include "core/soft_region.hpp"
#include "transport/tcp/completion_queue.hpp"
#include "transport/tcp/connection.hpp"
#include "transport/tcp/listener.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/wire.hpp"
#include "transport/transport.hpp"

namespace rdmakit {
namespace tcp {
namespace {

Deadline deadline_after(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + timeout;
}

}  // namespace

Result<std::shared_ptr<Context>> TcpContext::open(const Config& config) {
  auto options = resolve_tcp_options(config);
  if (!options) return std::unexpected(options.error());
  auto engine = Engine::start();
  if (!engine) return std::unexpected(engine.error());
  return std::make_shared<TcpContext>(config, *options, std::move(*engine));
}

TcpContext::TcpContext(Config config, TcpOptions options, std::unique_ptr<Engine> engine)
    : ContextProvider(std::move(config)),
      options_(options),
      table_(std::make_shared<RegistrationTable>()),
      device_slots_(std::make_shared<detail::PinnedSlotPool>(detail::PinnedSlotPool::Options{
          .chunk = options.device_chunk, .depth = options.device_ring_depth})),
      engine_(std::move(engine)) {}

TcpContext::~TcpContext() {
  // The engine thread may hold the last reference (a connection it was serving): it cannot join itself,
  // so a short-lived thread does it after the engine thread has left this call.
  if (engine_->on_engine_thread())
    std::thread([engine = std::move(engine_)]() mutable { engine.reset(); }).detach();
}

std::uint32_t TcpContext::acquire_connection_number() {
  std::lock_guard lock(numbers_mutex_);
  for (;;) {
    auto number = static_cast<std::uint32_t>(next_connection_++ & 0xffffff);
    if (number != 0 && live_numbers_.insert(number).second) return number;
  }
}

void TcpContext::release_connection_number(std::uint32_t number) {
  std::lock_guard lock(numbers_mutex_);
  live_numbers_.erase(number);
}

void TcpContext::set_next_connection_number_for_testing(std::uint64_t next) {
  std::lock_guard lock(numbers_mutex_);
  next_connection_ = next;
}

Capabilities TcpContext::capabilities() const {
  return Capabilities{.one_sided_without_target_cpu = false,
                      .atomics_coherent_with_cpu = true,
                      .kernel_bypass = false,
                      .max_message_size = kMaxMessageSize,
                      .max_sge = std::min(config().max_sge, kMaxSge),
                      .max_inline = 0,
                      .misaligned_atomic_refused_at_post = false,  // the target answers RemoteInvalidRequest
                      .address_prefix = {},
                      .progress_threads = 1,  // the engine
                      .device_memory_path = "staged",
                      // Across network namespaces (veth) on the 2-core CI machine (docs/allreduce-model.md).
                      .message_cost_us = 26,
                      .bandwidth_bytes_per_us = 620};
}

Result<std::shared_ptr<MemoryRegion>> TcpContext::register_memory(void* data, std::size_t size,
                                                                  Access access) {
  return register_soft(table_, shared_from_this(), data, size, access);
}

Result<std::shared_ptr<MemoryRegion>> TcpContext::register_device_memory(
    void* data, std::size_t size, Access access, const detail::cuda::PointerInfo& device) {
  return register_soft(table_, shared_from_this(), data, size, access, &device);
}

Result<std::shared_ptr<CompletionQueue>> TcpContext::create_cq(std::size_t depth) {
  return std::make_shared<TcpCompletionQueue>(config().wait_mode, config().spin,
                                              depth ? depth : config().cq_depth);
}

Result<std::shared_ptr<Listener>> TcpContext::listen(std::string_view address) {
  std::string where = address.empty() ? config().listen_address : std::string(address);
  auto socket = listen_on(where);
  if (!socket) return std::unexpected(socket.error());
  auto bound = local_address(socket->get());
  if (!bound) return std::unexpected(bound.error());
  auto acceptor = Acceptor::start(*engine_, std::move(*socket), identity(), options_.handshake_timeout);
  if (!acceptor) return std::unexpected(acceptor.error());
  auto self = std::static_pointer_cast<TcpContext>(shared_from_this());
  return std::make_shared<TcpListener>(std::move(self), std::move(*acceptor), std::move(*bound));
}

Result<std::shared_ptr<Connection>> TcpContext::connect(std::string_view address,
                                                        const ConnectOptions& options) {
  auto deadline = deadline_after(config().connect_timeout);
  auto socket = connect_to(address, deadline);
  if (!socket) return std::unexpected(socket.error());
  auto peer = handshake(socket->get(), identity(), deadline);
  if (!peer) return std::unexpected(peer.error());
  auto self = std::static_pointer_cast<TcpContext>(shared_from_this());
  auto connection = TcpConnection::create(std::move(self), std::move(*socket), std::move(*peer), options);
  if (!connection) return std::unexpected(connection.error());
  return std::shared_ptr<Connection>(std::move(*connection));
}

std::vector<ConnectionStats> TcpContext::diagnostics() const {
  std::vector<ConnectionStats> all;
  for (const auto& watched : engine_->watched())
    if (auto connection = std::dynamic_pointer_cast<TcpConnection>(watched))
      all.push_back(connection->stats());
  return all;
}

}  // namespace tcp

transport::Registration transport::tcp_registration() {
  return {
      .name = "tcp",
      .summary =
          "RC emulated over one TCP stream per connection; one-sided ops run on the target's progress thread",
      .options = &tcp::tcp_option_table(),
      .open = [](const Config& config) { return tcp::TcpContext::open(config); }};
}

}  // namespace rdmakit
