// An RC queue pair as a Connection. Set-up (QP creation, handshake, state transitions) lives in
// setup.cpp, teardown in connection.cpp, and the posting path in datapath.cpp.
#pragma once

#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "core/rc_state.hpp"
#include "transport/provider.hpp"
#include "transport/verbs/cm.hpp"
#include "transport/verbs/cq.hpp"
#include "transport/verbs/handshake.hpp"
#include "transport/verbs/monitor.hpp"
#include "transport/verbs/qp_attrs.hpp"

namespace rdmakit::verbs_impl {

class VerbsContext;

// A QP in RESET/INIT, before the handshake: created first because its number goes into the Hello.
class QueuePair {
 public:
  // `inline_size`: the verbs option of that name (the most bytes posted inline).
  static Result<QueuePair> create(const Device& device, const Config& config, std::uint32_t inline_size,
                                  VerbsCompletionQueue& send_cq, VerbsCompletionQueue& recv_cq);
  QueuePair(QueuePair&& other) noexcept
      : api_(other.api_), qp_(std::exchange(other.qp_, nullptr)), max_inline_(other.max_inline_) {}
  QueuePair& operator=(QueuePair&&) = delete;
  ~QueuePair();
  ibv_qp* get() const noexcept { return qp_; }
  std::uint32_t max_inline() const noexcept { return max_inline_; }
  Result<void> modify(const QpTransition& transition, const char* what) const;

 private:
  QueuePair(const Api& api, ibv_qp* qp, std::uint32_t max_inline) noexcept
      : api_(&api), qp_(qp), max_inline_(max_inline) {}
  const Api* api_;
  ibv_qp* qp_;
  std::uint32_t max_inline_;
};

class VerbsConnection final : public detail::ConnectionProvider, public CmWatcher {
 public:
  struct Parts {
    std::shared_ptr<VerbsContext> context;
    std::shared_ptr<VerbsCompletionQueue> send_cq;
    std::shared_ptr<VerbsCompletionQueue> recv_cq;
    std::uint32_t number;
    CmEndpoint endpoint;
    QueuePair qp;
    Hello peer;
    std::string peer_address;
  };
  explicit VerbsConnection(Parts parts);
  ~VerbsConnection() override;

  PeerInfo peer() const override;
  ConnectionStats stats() const override;
  Result<void> health() const override;
  void close() override;
  // The peer disconnected (or died and its kernel said so): fail the connection, flush what is pending.
  void on_cm_readable() override;
  int cm_fd() const noexcept { return endpoint_.fd(); }

 private:
  // Admission::Device: no lock, and no error-state or queue-full check in software (the QP's).
  Result<std::uint64_t> post_admitted(std::span<const WorkRequest> chain, std::uint64_t first,
                                      std::unique_lock<std::mutex>& lock) override;
  Result<std::uint64_t> post_recv_admitted(std::span<const Segment> sgl, std::uint64_t sequence,
                                           std::unique_lock<std::mutex>& lock) override;
  // Device memory staged through host memory (staging.hpp): a bounce buffer for each request of `chain` with
  // a staged local segment (filled now for WRITE and SEND), in `bounce` (one per request, length 0: none),
  // each recorded on the send queue; on failure nothing stays recorded.
  Result<void> stage_sends(std::span<const WorkRequest> chain, std::uint64_t first,
                           std::vector<ibv_sge>& bounce);

  // Declaration order is teardown order: the QP goes before the CM id and before the CQs it uses
  // (the base class holds the CQs, so they outlive everything here).
  std::shared_ptr<VerbsContext> context_;
  std::shared_ptr<VerbsCompletionQueue> send_cq_;
  std::shared_ptr<VerbsCompletionQueue> recv_cq_;
  std::shared_ptr<detail::RcState> track_;  // = rc_ptr(), read by the queues' pollers too
  CmEndpoint endpoint_;
  std::optional<QueuePair> qp_;
  Hello peer_;
  std::string peer_address_;
  std::uint32_t inline_size_;
  std::atomic<bool> closed_{false};
  std::mutex close_mutex_;
};

// Set-up (setup.cpp).
Result<std::shared_ptr<Connection>> connect_verbs(std::shared_ptr<VerbsContext> context,
                                                  std::string_view address, const ConnectOptions& options);
Result<std::shared_ptr<Listener>> listen_verbs(std::shared_ptr<VerbsContext> context,
                                               std::string_view address);

}  // namespace rdmakit::verbs_impl
