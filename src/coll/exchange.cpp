#include "coll/exchange.hpp"

#include <array>
#include <cstring>
#include <thread>

namespace rdmakit::coll::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kExtraReceives = 4;

Error peer_error(int rank, int peer, const std::string& what) {
  return Error(Errc::ConnectionBroken, "rank " + std::to_string(rank) + ": " + what + " (peer rank " +
                                           std::to_string(peer) + ")");
}

}  // namespace

Exchange::Exchange(int rank, int size, std::size_t chunk, std::uint32_t slots, std::chrono::milliseconds timeout,
                   std::chrono::microseconds spin)
    : rank_(rank), size_(size), chunk_(chunk), slots_(slots), timeout_(timeout), spin_(spin),
      peers_(static_cast<std::size_t>(size)) {}

Result<void> Exchange::arm() {
  // Each connection receives at most `slots` data chunks and `slots` credits before this rank reposts.
  for (Peer& p : peers_) {
    if (!p.connection) continue;
    p.credits = slots_;
    p.arrived_bytes.assign(slots_, 0);
    for (std::uint32_t i = 0; i < 2 * slots_ + kExtraReceives; ++i)
      if (auto id = p.connection->post_recv(std::span<const Segment>{}); !id)
        return std::unexpected(fail_all(peer_error(rank_, p.rank, "post_recv: " + id.error().message())));
  }
  return {};
}

Error Exchange::fail_all(Error error) {
  if (failure_) return *failure_;
  failure_ = error;
  for (Peer& p : peers_)
    if (p.connection) p.connection->close();
  return error;
}

void Exchange::handle(Fabric& fabric, const Completion& c) {
  auto found = fabric.rank_of_connection.find(c.connection);
  if (found == fabric.rank_of_connection.end()) return;
  Peer& p = peer(found->second);
  if (!c.ok()) {
    // Flushed completions after fail_all() closed the connections are the echo of a known failure.
    if (failure_) return;
    std::string why;
    if (auto health = p.connection->health(); !health) why = " (" + health.error().message() + ")";
    fail_all(Error(Errc::TransportFailure, "rank " + std::to_string(rank_) + ": " + std::string(to_string(c.opcode)) +
                                               " with rank " + std::to_string(p.rank) + " failed: " +
                                               std::string(to_string(c.status)) + why,
                   0, c.status));
    return;
  }
  if (Connection::is_recv_id(c.id)) {
    if (c.opcode == Opcode::RecvWriteImm) p.arrived_bytes[p.arrived++ % slots_] = c.bytes;
    else p.credits += c.imm;
    if (auto id = p.connection->post_recv(std::span<const Segment>{}); !id && !failure_)
      fail_all(peer_error(rank_, p.rank, "post_recv: " + id.error().message()));
  } else if (c.opcode == Opcode::WriteImm) {
    ++p.send_done;
  }
}

std::size_t Exchange::progress() {
  std::array<Completion, 64> batch;
  std::size_t total = 0;
  for (auto& fabric : fabrics_) {
    std::size_t n;
    while ((n = fabric->cq->poll(batch)) > 0) {
      for (std::size_t i = 0; i < n; ++i) handle(*fabric, batch[i]);
      total += n;
    }
  }
  return total;
}

// Sleeps in the transport's wait (spin, then block, per Config::wait_mode) on the one completion queue;
// with two fabrics it waits on each in turn for a short while.
Result<void> Exchange::block_briefly() {
  std::array<Completion, 64> batch;
  auto slice = fabrics_.size() == 1 ? std::chrono::microseconds(20000) : std::chrono::microseconds(200);
  for (auto& fabric : fabrics_) {
    auto n = fabric->cq->wait(batch, slice);
    if (!n) return std::unexpected(fail_all(n.error()));
    for (std::size_t i = 0; i < *n; ++i) handle(*fabric, batch[i]);
    if (*n > 0) break;
  }
  return {};
}

// Polls, yielding the CPU between polls, for up to spin_ since the last completion; then sleeps in the
// transport's wait. Yielding matters when ranks outnumber cores (8 ranks on 2 cores): the peer we wait
// for gets the core at once, where a sleep would cost a wake-up chain (doorbell, progress thread,
// condition variable) per message. It is what MPI does when oversubscribed. Polling also keeps the shm
// transport's polling lease, so peers do not ring our doorbell while we poll.
template <typename Ready>
Result<void> Exchange::wait_until(Ready ready, int rank, const char* what) {
  auto now = Clock::now();
  auto deadline = now + timeout_;
  auto spin_until = now + spin_;
  for (;;) {
    if (failure_) return std::unexpected(*failure_);
    if (ready()) return {};
    if (progress() > 0) {
      spin_until = Clock::now() + spin_;
      continue;
    }
    now = Clock::now();
    if (now < spin_until && now < deadline) {
      std::this_thread::yield();
      continue;
    }
    if (now >= deadline)
      return std::unexpected(fail_all(Error(Errc::Timeout, "rank " + std::to_string(rank_) + ": timed out after " +
                                                               std::to_string(timeout_.count()) + " ms waiting for " +
                                                               what + " rank " + std::to_string(rank))));
    if (auto ok = block_briefly(); !ok) return ok;
  }
}

Result<void> Exchange::send(int to, const void* data, std::size_t bytes) {
  Peer& p = peer(to);
  if (auto ok = wait_until([&] { return p.credits > 0 && p.sent - p.send_done < slots_; }, to, "a free slot at");
      !ok)
    return ok;
  std::size_t slot = p.sent % slots_;
  std::byte* source = p.outbound + slot * chunk_;
  if (bytes > 0) std::memcpy(source, data, bytes);
  Segment segment{reinterpret_cast<std::uint64_t>(source), static_cast<std::uint32_t>(bytes), p.outbound_lkey};
  RemoteAddress remote{p.remote.addr + slot * chunk_, p.remote.rkey, p.remote.owner_epoch};
  WorkRequest request{.opcode = Opcode::WriteImm, .local = std::span<const Segment>(&segment, bytes > 0 ? 1 : 0),
                      .remote = remote, .imm = 0};
  if (auto id = p.connection->post(std::span<const WorkRequest>(&request, 1)); !id)
    return std::unexpected(fail_all(peer_error(rank_, to, "write: " + id.error().message())));
  ++p.sent;
  --p.credits;
  return {};
}

Result<std::span<const std::byte>> Exchange::recv(int from) {
  Peer& p = peer(from);
  if (auto ok = wait_until([&] { return p.arrived > p.consumed; }, from, "data from"); !ok)
    return std::unexpected(ok.error());
  std::size_t slot = p.consumed % slots_;
  return std::span<const std::byte>(p.inbound + slot * chunk_, p.arrived_bytes[slot]);
}

Result<void> Exchange::release(int from) {
  Peer& p = peer(from);
  ++p.consumed;
  // The credit is unsignaled: nothing waits for its completion, and a failure still completes.
  WorkRequest credit{.opcode = Opcode::Send, .local = {}, .imm = 1, .with_imm = true, .signaled = false};
  if (auto id = p.connection->post(std::span<const WorkRequest>(&credit, 1)); !id)
    return std::unexpected(fail_all(peer_error(rank_, from, "credit: " + id.error().message())));
  return {};
}

Result<void> Exchange::flush() {
  for (Peer& p : peers_) {
    if (!p.connection) continue;
    if (auto ok = wait_until([&] { return p.send_done == p.sent; }, p.rank, "write completions to"); !ok)
      return ok;
  }
  return {};
}

}  // namespace rdmakit::coll::detail
