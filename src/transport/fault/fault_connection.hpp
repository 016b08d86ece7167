// A connection and a listener of the fault transport: thin shells over a Link and the inner listener.
#pragma once

#include <memory>

#include "transport/fault/fault_cq.hpp"
#include "transport/fault/link.hpp"
#include "transport/provider.hpp"

namespace rdmakit::fault {

class FaultConnection final : public detail::ConnectionProvider {
 public:
  // Takes the inner connection's number so that ids and Completion::connection pass through unchanged.
  FaultConnection(std::shared_ptr<Connection> inner, std::shared_ptr<FaultCompletionQueue> send_cq,
                  std::shared_ptr<FaultCompletionQueue> recv_cq, const Config& config, Capabilities caps,
                  Injector& injector);
  ~FaultConnection() override { link_->close(); }

  PeerInfo peer() const override { return link_->peer(); }
  ConnectionStats stats() const override { return link_->stats(); }
  Result<void> health() const override { return link_->health(); }
  void close() override { link_->close(); }

  const std::shared_ptr<Link>& link() const noexcept { return link_; }

 private:
  // Admission::Wrapper: the Link admits (its lock, its queue of synthetic completions), the inner
  // connection takes the ids.
  Result<std::uint64_t> post_admitted(std::span<const WorkRequest> chain, std::uint64_t,
                                      std::unique_lock<std::mutex>&) override {
    return link_->post(chain);
  }
  Result<std::uint64_t> post_recv_admitted(std::span<const Segment> sgl, std::uint64_t,
                                           std::unique_lock<std::mutex>&) override;

  std::shared_ptr<Link> link_;
  std::shared_ptr<FaultCompletionQueue> recv_queue_;
};

class FaultContext;

class FaultListener final : public detail::ListenerProvider {
 public:
  FaultListener(std::shared_ptr<FaultContext> context, std::shared_ptr<Listener> inner)
      : context_(std::move(context)), inner_(std::move(inner)) {}
  std::string address() const override { return inner_->address(); }
  Result<std::shared_ptr<Connection>> accept(std::chrono::milliseconds timeout,
                                             const ConnectOptions& options) override;

 private:
  std::shared_ptr<FaultContext> context_;
  std::shared_ptr<Listener> inner_;
};

}  // namespace rdmakit::fault
