#include "transport/tcp/context.hpp"

#include <thread>

#include "transport/tcp/completion_queue.hpp"
#include "core/soft_region.hpp"
#include "transport/tcp/connection.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/wire.hpp"
#include "transport/transport.hpp"

namespace rdmakit {
namespace tcp {
namespace {

Deadline deadline_after(std::chrono::milliseconds timeout) { return std::chrono::steady_clock::now() + timeout; }

class TcpListener final : public Listener {
 public:
  TcpListener(std::shared_ptr<TcpContext> context, Fd socket, std::string address)
      : context_(std::move(context)), socket_(std::move(socket)), address_(std::move(address)) {}

  std::string address() const override { return address_; }

  Result<std::shared_ptr<Connection>> accept(std::chrono::milliseconds timeout,
                                             const ConnectOptions& options) override {
    auto deadline = deadline_after(timeout);
    auto socket = accept_from(socket_.get(), deadline);
    if (!socket) return std::unexpected(socket.error());
    // The handshake gets its own bound: a peer that connects and says nothing must not hold accept().
    auto handshake_deadline = std::max(deadline, deadline_after(context_->config().connect_timeout));
    auto peer = handshake(socket->get(), context_->identity(), handshake_deadline);
    if (!peer) return std::unexpected(peer.error());
    auto connection = TcpConnection::create(context_, std::move(*socket), std::move(*peer), options);
    if (!connection) return std::unexpected(connection.error());
    return std::shared_ptr<Connection>(std::move(*connection));
  }

 private:
  std::shared_ptr<TcpContext> context_;
  Fd socket_;
  std::string address_;
};

}  // namespace

Result<std::shared_ptr<Context>> TcpContext::open(const Config& config) {
  auto engine = Engine::start();
  if (!engine) return std::unexpected(engine.error());
  return std::make_shared<TcpContext>(config, std::move(*engine));
}

TcpContext::TcpContext(Config config, std::unique_ptr<Engine> engine)
    : Context(std::move(config)), table_(std::make_shared<RegistrationTable>()), engine_(std::move(engine)) {}

TcpContext::~TcpContext() {
  // The engine thread may hold the last reference (a connection it was serving): it cannot join itself,
  // so a short-lived thread does it after the engine thread has left this call.
  if (engine_->on_engine_thread()) std::thread([engine = std::move(engine_)]() mutable { engine.reset(); }).detach();
}

Capabilities TcpContext::capabilities() const {
  return Capabilities{.one_sided_without_target_cpu = false, .atomics_coherent_with_cpu = true,
                      .kernel_bypass = false, .max_message_size = kMaxMessageSize, .max_sge = kMaxSge,
                      .max_inline = 0};
}

Result<std::shared_ptr<MemoryRegion>> TcpContext::register_memory(void* data, std::size_t size, Access access) {
  return register_soft(table_, shared_from_this(), data, size, access);
}

Result<std::shared_ptr<CompletionQueue>> TcpContext::create_cq(std::size_t) {
  return std::make_shared<TcpCompletionQueue>(config().wait_mode, config().spin);
}

Result<std::shared_ptr<Listener>> TcpContext::listen(std::string_view address) {
  std::string where = address.empty() ? config().listen_address : std::string(address);
  auto socket = listen_on(where);
  if (!socket) return std::unexpected(socket.error());
  auto bound = local_address(socket->get());
  if (!bound) return std::unexpected(bound.error());
  auto self = std::static_pointer_cast<TcpContext>(shared_from_this());
  return std::make_shared<TcpListener>(std::move(self), std::move(*socket), std::move(*bound));
}

Result<std::shared_ptr<Connection>> TcpContext::connect(std::string_view address, const ConnectOptions& options) {
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
    if (auto connection = std::dynamic_pointer_cast<TcpConnection>(watched)) all.push_back(connection->stats());
  return all;
}

}  // namespace tcp

Result<std::shared_ptr<Context>> transport::open_tcp(const Config& config) { return tcp::TcpContext::open(config); }

}  // namespace rdmakit
