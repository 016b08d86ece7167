// Connection control path: construction, completion bookkeeping, the error state, close.
#include "transport/shm/connection.hpp"

#include <sys/socket.h>

#include <thread>

#include "core/rc_state.hpp"
#include "core/tsan.hpp"
#include "transport/shm/registry.hpp"

namespace rdmakit::shm {

ShmConnection::ShmConnection(std::shared_ptr<ShmContext> context, std::uint32_t number,
                             std::shared_ptr<SoftCompletionQueue> send_cq,
                             std::shared_ptr<SoftCompletionQueue> recv_cq,
                             std::shared_ptr<const PeerView> peer, Mapping link, int side, UniqueFd socket,
                             std::string address)
    : ConnectionProvider(number, send_cq, recv_cq,
                         std::make_shared<detail::RcState>(number, context->config().send_queue_depth,
                                                           context->config().recv_queue_depth),
                         detail::Admission::Software, context->capabilities(), peer->epoch),
      context_(std::move(context)),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)),
      peer_(std::move(peer)),
      link_(std::move(link)),
      side_(side),
      socket_(std::move(socket)),
      address_(std::move(address)) {
  // Completions not yet reaped still hold their ring slot, so the completion ring can never overflow.
  const std::uint64_t recv_depth = std::min<std::uint64_t>(kRingSlots, context_->config().recv_queue_depth);
  set_software_queues({pending_.size_address(), context_->config().send_queue_depth, send_cq_.get()},
                      {&recvs_queued_, recv_depth, recv_cq_.get()});
}

ShmConnection::~ShmConnection() { close(); }

PeerInfo ShmConnection::peer() const { return PeerInfo{peer_->name, peer_->id, peer_->epoch, address_}; }

ConnectionStats ShmConnection::stats() const { return rc().stats(peer()); }

Result<void> ShmConnection::health() const { return rc().health(); }

void ShmConnection::close() {
  context_->detach(this);  // the progress thread no longer looks at us after this
  std::lock_guard lock(mutex_);
  if (!rc().close()) return;
  enter_error(
      Error(Errc::ConnectionBroken, "connection " + std::to_string(number()) + " was closed by this side"),
      Status::Flushed);
  // The peer sees EOF at once and fails what it has pending with us.
  ::shutdown(socket_.get(), SHUT_RDWR);
}

// The key is checked as a WRITE or READ checks it, but once: no pin is held afterwards (see the contract
// in connection.hpp). The arenas stay mapped while peer_ lives, which this connection keeps alive.
Result<std::byte*> ShmConnection::map_remote(RemoteAddress remote, std::size_t length, Access access) {
  std::string what =
      "map_remote of " + std::to_string(length) + " bytes at " + std::to_string(remote.addr) + ": ";
  if (rc().closed())
    return fail(Errc::ConnectionBroken, what + "connection " + std::to_string(number()) + " was closed");
  if (access != Access::RemoteRead && access != Access::RemoteWrite &&
      access != (Access::RemoteRead | Access::RemoteWrite))
    return fail(Errc::InvalidArgument, what + "access must be RemoteRead and/or RemoteWrite");
  if (remote.owner_epoch != 0 && remote.owner_epoch != peer_->epoch)
    return fail(Errc::StaleDescriptor,
                what + "the descriptor is from an earlier life of peer " + peer_->name);
  if (check_remote(peer_->ctl(), remote.rkey, remote.addr, length, access) != Status::Success)
    return fail(Errc::InvalidArgument, what + "key " + std::to_string(remote.rkey) +
                                           " does not grant that range with those rights at peer " +
                                           peer_->name);
  std::byte* mine = peer_->translate(remote.addr, length, has(access, Access::RemoteWrite));
  if (!mine)
    return fail(Errc::NotSupported, what + "the memory is not in peer " + peer_->name +
                                        "'s allocate() arenas (registered memory is reached by "
                                        "cross-memory attach only): use READ and WRITE");
  return mine;
}

void ShmConnection::peer_gone() {
  std::lock_guard lock(mutex_);
  peer_gone_locked();
}

void ShmConnection::peer_gone_locked() {
  gone_.store(true, std::memory_order_release);
  enter_error(
      Error(Errc::ConnectionBroken, "shm peer " + peer_->name + " (pid " + std::to_string(peer_->pid) +
                                        ") closed the connection or died"),
      Status::TransportRetryExceeded);
}

bool ShmConnection::pins(std::uint32_t key) const noexcept {
  bool held = !gone() && in().pin.load(std::memory_order_seq_cst) == key;
  tsan::acquire_from_peer();  // the initiator's accesses under the pin happen before its release
  return held;
}

void ShmConnection::push(SoftCompletionQueue& cq, const Completion& completion) {
  rc().completed(completion);
  cq.push(completion);
}

void ShmConnection::finish(std::uint64_t id, Opcode opcode, bool signaled, const Outcome& outcome) {
  const Completion completion{
      .id = id, .status = outcome.status, .opcode = opcode, .bytes = outcome.bytes, .connection = number()};
  if (completion.ok() && !signaled) {
    // Counted when drain() ends: sends finish in order, so the last id covers the rest, and the count's
    // locked compare-and-swap (which waits for the copy's stores to drain) is paid once per chain.
    unsignaled_done_ = id;
    return;
  }
  settle_unsignaled();
  // The failure is recorded before its completion is visible, so health() agrees with what was polled.
  if (!completion.ok()) rc().fail(detail::completion_error(completion));
  push(*send_cq_, completion);
  if (!completion.ok()) enter_error(detail::completion_error(completion), Status::Flushed);
}

void ShmConnection::settle_unsignaled() {
  if (!unsignaled_done_) return;
  rc().completed(*unsignaled_done_);
  unsignaled_done_.reset();
}

void ShmConnection::enter_error(Error why, Status head_status) {
  settle_unsignaled();
  const auto opcode_of = [](const Pending& op) { return op.request.opcode; };
  if (!rc().enter_error(std::move(why), head_status, pending_, opcode_of,
                        [&](const Completion& c) { send_cq_->push(c); }))
    return;
  has_pending_.store(false, std::memory_order_release);
  close_inbound();
}

// Stops the peer from delivering into our receives, takes what it already delivered, flushes the rest.
void ShmConnection::close_inbound() {
  Inbound& inbound = in();
  inbound.closed.store(1, std::memory_order_seq_cst);
  // A delivery that saw `closed` still 0 is finishing: let it, so its completion is not lost. Bounded: a
  // stopped peer cannot hold us past the timeout.
  auto deadline = Clock::now() + context_->config().timeout;
  while (inbound.pin.load(std::memory_order_seq_cst) == kDeliveringPin && !gone() && Clock::now() < deadline)
    std::this_thread::yield();
  reap();
  rc().flush_recvs(receives_, [&](const Completion& c) { recv_cq_->push(c); });
}

}  // namespace rdmakit::shm
