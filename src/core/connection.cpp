// Connection's definitions (a facade over detail::ConnectionProvider) and the provider's shared part: the
// RC prologue of post() and post_recv().
#include "rdmakit/connection.hpp"

#include "core/rc_state.hpp"
#include "core/soft_cq.hpp"
#include "transport/provider.hpp"

namespace rdmakit {
namespace detail {

ConnectionProvider::ConnectionProvider(std::uint32_t number, std::shared_ptr<CompletionQueue> send_cq,
                                       std::shared_ptr<CompletionQueue> recv_cq,
                                       std::shared_ptr<RcState> state, Admission admission, Capabilities caps,
                                       std::uint64_t peer_epoch)
    : number_(number),
      admission_(admission),
      state_(std::move(state)),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)),
      caps_(std::move(caps)),
      peer_epoch_(peer_epoch) {
  provider(*send_cq_).attach_state(state_);
  if (recv_cq_ != send_cq_) provider(*recv_cq_).attach_state(state_);
}

ConnectionProvider::~ConnectionProvider() {
  provider(*send_cq_).detach_state(state_.get());
  if (recv_cq_ != send_cq_) provider(*recv_cq_).detach_state(state_.get());
}

Result<std::byte*> ConnectionProvider::map_remote(RemoteAddress, std::size_t, Access) {
  return fail(Errc::NotSupported,
              "map_remote: this transport does not map a peer's memory into this process "
              "(only shm does): use READ and WRITE");
}

// The RC prologue, one order and one wording for every transport (rc_state.hpp): (1) the request and (2) a
// connection closed by this side, refused; then, for a queue in software, under the lock that orders the
// connection's completions, (3) the error state (accepted and flushed) and (4) room in the queue. Nothing
// here is virtual but the one hook at the end.
Result<std::uint64_t> ConnectionProvider::run_post(std::span<const WorkRequest> chain) {
  if (auto ok = state_->check_post(chain, caps_, peer_epoch_); !ok) [[unlikely]]
    return std::unexpected(ok.error());
  std::unique_lock<std::mutex> lock;
  std::uint64_t first = 0;
  if (admission_ == Admission::Software) {
    lock = std::unique_lock(mutex_);
    if (auto refused = state_->admit_post(chain, *sends_.queued, sends_.depth,
                                          [&](const Completion& c) { sends_.flush_to->push(c); }))
      return *refused;
  }
  if (admission_ != Admission::Wrapper) first = state_->take_sends(chain.size());
  return post_admitted(chain, first, lock);
}

Result<std::uint64_t> ConnectionProvider::run_post_recv(std::span<const Segment> sgl) {
  if (auto ok = state_->check_post_recv(sgl, caps_); !ok) [[unlikely]]
    return std::unexpected(ok.error());
  std::unique_lock<std::mutex> lock;
  std::uint64_t sequence = 0;
  if (admission_ == Admission::Software) {
    lock = std::unique_lock(mutex_);
    if (auto refused = state_->admit_recv(*recvs_.queued, recvs_.depth,
                                          [&](const Completion& c) { recvs_.flush_to->push(c); }))
      return *refused;
  }
  if (admission_ != Admission::Wrapper) sequence = state_->take_recv();
  return post_recv_admitted(sgl, sequence, lock);
}

}  // namespace detail

Connection::~Connection() = default;

Result<std::uint64_t> Connection::post(std::span<const WorkRequest> chain) {
  return detail::provider(*this).run_post(chain);
}
Result<std::uint64_t> Connection::post_recv(std::span<const Segment> sgl) {
  return detail::provider(*this).run_post_recv(sgl);
}
Result<std::byte*> Connection::map_remote(RemoteAddress remote, std::size_t length, Access access) {
  return detail::provider(*this).map_remote(remote, length, access);
}
CompletionQueue& Connection::send_cq() const noexcept { return *detail::provider(*this).send_cq_ptr(); }
CompletionQueue& Connection::recv_cq() const noexcept { return *detail::provider(*this).recv_cq_ptr(); }
std::uint32_t Connection::number() const noexcept { return detail::provider(*this).number(); }
PeerInfo Connection::peer() const { return detail::provider(*this).peer(); }
ConnectionStats Connection::stats() const { return detail::provider(*this).stats(); }
Result<void> Connection::health() const { return detail::provider(*this).health(); }
void Connection::close() { detail::provider(*this).close(); }

namespace {

Result<std::uint64_t> post_one(Connection& connection, const WorkRequest& request) {
  return connection.post(std::span(&request, 1));
}

}  // namespace

Result<std::uint64_t> Connection::write(std::span<const Segment> local, RemoteAddress remote, bool signaled) {
  return post_one(
      *this, WorkRequest{.opcode = Opcode::Write, .local = local, .remote = remote, .signaled = signaled});
}
Result<std::uint64_t> Connection::write(Segment local, RemoteAddress remote, bool signaled) {
  return write(std::span(&local, 1), remote, signaled);
}
Result<std::uint64_t> Connection::write_imm(std::span<const Segment> local, RemoteAddress remote,
                                            std::uint32_t imm) {
  return post_one(*this,
                  WorkRequest{.opcode = Opcode::WriteImm, .local = local, .remote = remote, .imm = imm});
}
Result<std::uint64_t> Connection::write_imm(Segment local, RemoteAddress remote, std::uint32_t imm) {
  return write_imm(std::span(&local, 1), remote, imm);
}
Result<std::uint64_t> Connection::read(std::span<const Segment> local, RemoteAddress remote) {
  return post_one(*this, WorkRequest{.opcode = Opcode::Read, .local = local, .remote = remote});
}
Result<std::uint64_t> Connection::read(Segment local, RemoteAddress remote) {
  return read(std::span(&local, 1), remote);
}
Result<std::uint64_t> Connection::compare_swap(Segment old_value, RemoteAddress remote,
                                               std::uint64_t expected, std::uint64_t desired) {
  return post_one(*this, WorkRequest{.opcode = Opcode::CompareSwap,
                                     .local = std::span(&old_value, 1),
                                     .remote = remote,
                                     .compare_add = expected,
                                     .swap = desired});
}
Result<std::uint64_t> Connection::fetch_add(Segment old_value, RemoteAddress remote, std::uint64_t add) {
  return post_one(*this, WorkRequest{.opcode = Opcode::FetchAdd,
                                     .local = std::span(&old_value, 1),
                                     .remote = remote,
                                     .compare_add = add});
}
Result<std::uint64_t> Connection::send(std::span<const Segment> local) {
  return post_one(*this, WorkRequest{.opcode = Opcode::Send, .local = local});
}
Result<std::uint64_t> Connection::send(Segment local) { return send(std::span(&local, 1)); }
Result<std::uint64_t> Connection::send_imm(Segment local, std::uint32_t imm) {
  return post_one(
      *this,
      WorkRequest{.opcode = Opcode::Send, .local = std::span(&local, 1), .imm = imm, .with_imm = true});
}
Result<std::uint64_t> Connection::post_recv(Segment sgl) { return post_recv(std::span(&sgl, 1)); }

Result<Completion> Connection::wait(std::uint64_t id, std::chrono::nanoseconds timeout) {
  const auto& self = detail::provider(*this);
  auto waitable = self.rc().check_waitable(id);  // before looking in the queue (RcState::check_waitable)
  if (!waitable) return std::unexpected(waitable.error());
  CompletionQueue& queue = is_recv_id(id) ? *self.recv_cq_ptr() : *self.send_cq_ptr();
  if (*waitable == detail::RcState::Waitable::Yes) return queue.wait_for(id, timeout);
  // Done long ago: one look in the queue (no wait) finds its completion, or it was taken.
  auto queued = queue.wait_for(id, std::chrono::nanoseconds::zero());
  if (!queued && queued.error().code() == Errc::Timeout) return detail::RcState::taken_error(id);
  return queued;
}

}  // namespace rdmakit
