#include "rdmakit/connection.hpp"

#include "core/rc_state.hpp"

namespace rdmakit {

Connection::Connection(std::uint32_t number, std::shared_ptr<CompletionQueue> send_cq,
                       std::shared_ptr<CompletionQueue> recv_cq, std::shared_ptr<detail::RcState> state)
    : number_(number), state_(std::move(state)), send_cq_(std::move(send_cq)), recv_cq_(std::move(recv_cq)) {
  send_cq_->attach(state_);
  if (recv_cq_ != send_cq_) recv_cq_->attach(state_);
}

Connection::~Connection() {
  send_cq_->detach(state_.get());
  if (recv_cq_ != send_cq_) recv_cq_->detach(state_.get());
}

namespace {

Result<std::uint64_t> post_one(Connection& connection, const WorkRequest& request) {
  return connection.post(std::span(&request, 1));
}

}  // namespace

Result<std::byte*> Connection::map_remote(RemoteAddress, std::size_t, Access) {
  return fail(Errc::NotSupported,
              "map_remote: this transport does not map a peer's memory into this process "
              "(only shm does): use READ and WRITE");
}

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
  auto waitable = state_->check_waitable(id);  // before looking in the queue (RcState::check_waitable)
  if (!waitable) return std::unexpected(waitable.error());
  CompletionQueue& queue = is_recv_id(id) ? *recv_cq_ : *send_cq_;
  if (*waitable == detail::RcState::Waitable::Yes) return queue.wait_for(id, timeout);
  // Done long ago: one look in the queue (no wait) finds its completion, or it was taken.
  auto queued = queue.wait_for(id, std::chrono::nanoseconds::zero());
  if (!queued && queued.error().code() == Errc::Timeout) return detail::RcState::taken_error(id);
  return queued;
}

}  // namespace rdmakit
