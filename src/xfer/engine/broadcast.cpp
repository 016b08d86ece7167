// The pipelined broadcast chain (include/rdmakit/xfer/broadcast.hpp has the protocol).
#include "rdmakit/xfer/broadcast.hpp"

#include <array>
#include <optional>
#include <thread>
#include <vector>

#include "xfer/engine/record.hpp"

namespace rdmakit::xfer {
namespace {

using Clock = std::chrono::steady_clock;

std::string hop_key(const BroadcastOptions& options, std::uint32_t rank) {
  return "xfer/bcast/" + options.session + "/" + std::to_string(rank);
}

Result<void> check(const BroadcastOptions& options, std::uint64_t region_size) {
  if (options.receivers == 0 || options.size == 0 || options.chunk_bytes == 0 || options.window == 0) {
    return fail(Errc::InvalidArgument, "broadcast: receivers, size, chunk_bytes and window must be positive");
  }
  if (options.chunk_bytes > (1u << 30))
    return fail(Errc::InvalidArgument, "broadcast: chunk_bytes above 1 GiB");
  if (options.size > region_size) {
    return fail(Errc::InvalidArgument, "broadcast: size " + std::to_string(options.size) +
                                           " exceeds the region (" + std::to_string(region_size) + " bytes)");
  }
  if ((options.size + options.chunk_bytes - 1) / options.chunk_bytes > UINT32_MAX) {
    return fail(Errc::InvalidArgument, "broadcast: more chunks than an immediate can number");
  }
  return {};
}

// Waits until the next hop has published where it listens.
Result<detail::SegmentRecord> find_hop(MetadataStore& metadata, const std::string& key,
                                       Clock::time_point deadline) {
  while (true) {
    auto value = metadata.lookup(key);
    if (!value) return std::unexpected(value.error());
    if (*value) return detail::decode(**value);
    if (Clock::now() > deadline) return fail(Errc::Timeout, "broadcast: '" + key + "' never appeared");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// One outgoing hop: WRITEs with immediate of chunks into the next receiver, at most `window` in flight.
class Forwarder {
 public:
  // `cq`: the queue its completions go to; empty: one of its own.
  static Result<Forwarder> open(Context& context, MetadataStore& metadata, const BroadcastOptions& options,
                                std::uint32_t next, Clock::time_point deadline,
                                std::shared_ptr<CompletionQueue> cq) {
    auto record = find_hop(metadata, hop_key(options, next), deadline);
    if (!record) return std::unexpected(record.error());
    if (record->length < options.size)
      return fail(Errc::InvalidArgument, "broadcast: receiver region too small");
    if (!cq) {
      auto own = context.create_cq(options.window + 1);
      if (!own) return std::unexpected(own.error());
      cq = std::move(*own);
    }
    auto connection = context.connect(record->rails.front().address, ConnectOptions{.send_cq = cq});
    if (!connection) return std::unexpected(connection.error());
    return Forwarder(std::move(*connection), std::move(cq), record->rails.front().region, options.window);
  }
  Result<void> send(const MemoryRegion& local, const BroadcastOptions& options, std::uint32_t chunk) {
    while (inflight_ >= window_) {
      if (auto reaped = reap(); !reaped) return reaped;
    }
    return post(local, options, chunk);
  }
  bool has_room() const { return inflight_ < window_; }
  // Posts chunk `chunk` now (the caller checked has_room()).
  Result<void> post(const MemoryRegion& local, const BroadcastOptions& options, std::uint32_t chunk) {
    auto offset = std::uint64_t{chunk} * options.chunk_bytes;
    auto length = static_cast<std::uint32_t>(std::min(options.chunk_bytes, options.size - offset));
    auto posted = connection_->write_imm(local.slice(offset, length), remote_.at(offset), chunk);
    if (!posted) return std::unexpected(posted.error());
    ++inflight_;
    return {};
  }
  // A completion of ours that the caller's loop reaped from a shared queue.
  Result<void> completed(const Completion& completion) {
    if (!completion.ok()) {
      return fail(Errc::TransportFailure,
                  "broadcast: forwarding failed: " + std::string(to_string(completion.status)));
    }
    --inflight_;
    return {};
  }
  std::uint32_t inflight() const { return inflight_; }
  Result<void> drain() {
    while (inflight_ > 0) {
      if (auto reaped = reap(); !reaped) return reaped;
    }
    return {};
  }

 private:
  Forwarder(std::shared_ptr<Connection> connection, std::shared_ptr<CompletionQueue> cq, RemoteRegion remote,
            std::uint32_t window)
      : connection_(std::move(connection)), cq_(std::move(cq)), remote_(remote), window_(window) {}
  Result<void> reap() {
    std::array<Completion, 16> done;
    auto n = cq_->wait(done, std::chrono::seconds(1));
    if (!n) return std::unexpected(n.error());
    for (std::size_t i = 0; i < *n; ++i) {
      if (!done[i].ok()) {
        return fail(Errc::TransportFailure,
                    "broadcast: forwarding failed: " + std::string(to_string(done[i].status)));
      }
    }
    if (*n == 0) {
      if (auto health = connection_->health(); !health) return health;
    }
    inflight_ -= static_cast<std::uint32_t>(*n);
    return {};
  }

  std::shared_ptr<Connection> connection_;
  std::shared_ptr<CompletionQueue> cq_;
  RemoteRegion remote_;
  std::uint32_t window_;
  std::uint32_t inflight_ = 0;
};

std::uint32_t chunk_count(const BroadcastOptions& options) {
  return static_cast<std::uint32_t>((options.size + options.chunk_bytes - 1) / options.chunk_bytes);
}

// Receiver side: listens, publishes where, and accepts the predecessor with receives posted for it.
struct Inbound {
  std::shared_ptr<Listener> listener;
  std::shared_ptr<CompletionQueue> recv_cq;
  std::shared_ptr<Connection> connection;
};

Result<Inbound> listen_and_publish(Context& context, MetadataStore& metadata, const MemoryRegion& destination,
                                   std::uint32_t rank, const BroadcastOptions& options) {
  Inbound in;
  auto listener = context.listen(options.listen_address);
  if (!listener) return std::unexpected(listener.error());
  in.listener = *listener;
  // One queue for the receives and the forwards, so one wait drives both (the shm initiator's copies
  // progress when its queue is polled).
  auto cq = context.create_cq(3 * options.window + 1);
  if (!cq) return std::unexpected(cq.error());
  in.recv_cq = *cq;
  detail::SegmentRecord record{
      context.identity().name,
      detail::host_id(),
      options.size,
      {{std::string(context.transport()), in.listener->address(), destination.descriptor()}}};
  if (auto put = metadata.publish(hop_key(options, rank), detail::encode(record)); !put)
    return std::unexpected(put.error());
  return in;
}

}  // namespace

Result<BroadcastResult> broadcast_send(Context& context, MetadataStore& metadata, const MemoryRegion& source,
                                       const BroadcastOptions& options) {
  if (auto ok = check(options, source.size()); !ok) return std::unexpected(ok.error());
  auto deadline = Clock::now() + options.timeout;
  auto next = Forwarder::open(context, metadata, options, 1, deadline, nullptr);
  if (!next) return std::unexpected(next.error());
  auto start = Clock::now();
  auto chunks = chunk_count(options);
  for (std::uint32_t k = 0; k < chunks; ++k) {
    if (auto sent = next->send(source, options, k); !sent) return std::unexpected(sent.error());
  }
  if (auto drained = next->drain(); !drained) return std::unexpected(drained.error());
  return BroadcastResult{Clock::now() - start, chunks};
}

Result<BroadcastResult> broadcast_receive(Context& context, MetadataStore& metadata,
                                          const MemoryRegion& destination, std::uint32_t rank,
                                          const BroadcastOptions& options) {
  if (auto ok = check(options, destination.size()); !ok) return std::unexpected(ok.error());
  if (rank == 0 || rank > options.receivers)
    return fail(Errc::InvalidArgument, "broadcast: rank out of 1..N");
  auto deadline = Clock::now() + options.timeout;
  auto in = listen_and_publish(context, metadata, destination, rank, options);
  if (!in) return std::unexpected(in.error());
  std::optional<Forwarder> next;
  if (rank < options.receivers) {
    auto opened = Forwarder::open(context, metadata, options, rank + 1, deadline, in->recv_cq);
    if (!opened) return std::unexpected(opened.error());
    next.emplace(std::move(*opened));
  }
  auto accepted =
      in->listener->accept(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                           ConnectOptions{.recv_cq = in->recv_cq});
  if (!accepted) return std::unexpected(accepted.error());
  in->connection = *accepted;
  auto chunks = chunk_count(options);
  // Twice the sender's window of receives: a consumed one is posted again before it can be missed.
  std::uint32_t receives = 0;
  auto post_receive = [&]() -> Result<void> {
    if (receives == chunks) return {};
    ++receives;
    auto posted = in->connection->post_recv(std::span<const Segment>{});
    if (!posted) return std::unexpected(posted.error());
    return {};
  };
  for (std::uint32_t i = 0; i < 2 * options.window; ++i) {
    if (auto posted = post_receive(); !posted) return std::unexpected(posted.error());
  }
  auto start = Clock::now();
  std::uint32_t landed = 0;
  std::vector<bool> seen(chunks, false);
  std::vector<std::uint32_t> to_forward;  // landed, waiting for room in the forwarding window
  std::size_t forwarded = 0;
  std::array<Completion, 32> done;
  while (landed < chunks || (next && (forwarded < chunks || next->inflight() > 0))) {
    if (Clock::now() > deadline)
      return fail(Errc::Timeout, "broadcast: " + std::to_string(landed) + " of " + std::to_string(chunks) +
                                     " chunks landed in time");
    auto n = in->recv_cq->wait(done, std::chrono::seconds(1));
    if (!n) return std::unexpected(n.error());
    for (std::size_t i = 0; i < *n; ++i) {
      const auto& c = done[i];
      if (!Connection::is_recv_id(c.id)) {
        if (auto ok = next->completed(c); !ok) return std::unexpected(ok.error());
        continue;
      }
      if (!c.ok())
        return fail(Errc::TransportFailure, "broadcast: receive failed: " + std::string(to_string(c.status)));
      if (c.opcode != Opcode::RecvWriteImm || c.imm >= chunks || seen[c.imm]) {
        return fail(Errc::ProtocolError, "broadcast: unexpected chunk notification " + std::to_string(c.imm));
      }
      seen[c.imm] = true;
      ++landed;
      if (auto posted = post_receive(); !posted) return std::unexpected(posted.error());
      if (next) to_forward.push_back(c.imm);
    }
    while (next && forwarded < to_forward.size() && next->has_room()) {
      if (auto sent = next->post(destination, options, to_forward[forwarded]); !sent)
        return std::unexpected(sent.error());
      ++forwarded;
    }
    if (*n == 0 && in->connection) {
      if (auto health = in->connection->health(); !health && landed < chunks)
        return std::unexpected(health.error());
    }
  }
  (void)metadata.unpublish(hop_key(options, rank));
  return BroadcastResult{Clock::now() - start, chunks};
}

}  // namespace rdmakit::xfer
