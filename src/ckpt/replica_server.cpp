// `rdmakit-ckpt serve`: holds the newest complete replica of each rank in memory it registered.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ckpt/checksum.hpp"
#include "ckpt/io.hpp"
#include "ckpt/manifest.hpp"
#include "ckpt/options.hpp"
#include "ckpt/persist.hpp"
#include "ckpt/replica.hpp"
#include "ckpt/replica_channel.hpp"
#include "core/log.hpp"
#include "rdmakit/ckpt/serve.hpp"

namespace rdmakit::ckpt {
using namespace detail;
namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);

// One rank's two slots; `newest` is the slot holding its newest verified replica.
struct RankSlots {
  std::shared_ptr<MemoryRegion> region;
  std::uint32_t world_size = 0;
  std::uint64_t bytes = 0;
  std::optional<std::uint32_t> newest;
  std::uint64_t step = 0;
  std::uint64_t manifest_bytes = 0;
  std::mutex busy;  // one commit or persist of this rank at a time

  std::uint64_t slot_offset(std::uint32_t slot) const { return slot * replica_slot_bytes(bytes); }
  unsigned char* slot_data(std::uint32_t slot) const {
    return static_cast<unsigned char*>(region->data()) + slot_offset(slot);
  }
};

Message reply(MessageType type, std::string error = {}) {
  return Message{.type = type, .status = error.empty() ? 0u : 1u, .text = std::move(error)};
}

// The manifest a client wrote after its data, decoded and checked against what the server knows.
Result<Manifest> checked_manifest(const RankSlots& slots, std::uint32_t rank, const Message& commit) {
  if (commit.slot > 1) return fail(Errc::ProtocolError, "slot " + std::to_string(commit.slot));
  if (commit.manifest_bytes == 0 || commit.manifest_bytes > kReplicaManifestArea)
    return fail(Errc::ProtocolError, "manifest of " + std::to_string(commit.manifest_bytes) + " bytes");
  const char* text =
      reinterpret_cast<const char*>(slots.slot_data(commit.slot) + round_up(slots.bytes, kIoAlignment));
  auto manifest = decode_manifest(std::string_view(text, commit.manifest_bytes));
  if (!manifest) return manifest;
  if (manifest->rank != rank || manifest->world_size != slots.world_size || manifest->step != commit.step ||
      manifest->files.size() != 1 || manifest->files[0].size != slots.bytes)
    return fail(Errc::ProtocolError, "the manifest does not describe this rank's replica");
  for (const auto& c : manifest->chunks)
    if (c.source_step) return fail(Errc::ProtocolError, "a replica holds every chunk (no references)");
  return manifest;
}

Result<void> verify_slot(const RankSlots& slots, std::uint32_t slot, const Manifest& manifest) {
  for (std::size_t i = 0; i < manifest.chunks.size(); ++i) {
    const auto& c = manifest.chunks[i];
    if (checksum64(slots.slot_data(slot) + c.offset, c.size) != c.checksum)
      return fail(Errc::ProtocolError, "checksum mismatch in chunk " + std::to_string(i));
  }
  return {};
}

}  // namespace

struct ReplicaServer::Impl {
  ServeOptions options;
  std::shared_ptr<Context> context;
  std::shared_ptr<Listener> listener;
  std::optional<Ring> ring;  // --persist
  EngineOptions persist_options;
  bool warned_buffered = false;

  mutable std::mutex mutex;
  std::map<std::uint32_t, std::shared_ptr<RankSlots>> ranks;
  std::uint64_t used = 0;
  std::atomic<bool> stop = false;
  std::mutex threads_mutex;
  std::vector<std::jthread> connections;
  std::jthread acceptor;  // last: joined first

  Result<std::shared_ptr<RankSlots>> slots_for(const Message& hello) {
    if (hello.world_size == 0 || hello.rank >= hello.world_size || hello.bytes == 0 ||
        hello.bytes > (1ull << 40))
      return fail(Errc::InvalidArgument, "bad rank, world size or size");
    std::lock_guard lock(mutex);
    auto& entry = ranks[hello.rank];
    // Same shape: the rank's replicas are kept for a restarted process to fetch.
    if (entry && entry->world_size == hello.world_size && entry->bytes == hello.bytes) return entry;
    std::uint64_t need = 2 * replica_slot_bytes(hello.bytes);
    std::uint64_t freed = entry ? 2 * replica_slot_bytes(entry->bytes) : 0;
    if (used - freed + need > options.budget_bytes)
      return fail(Errc::ResourceExhausted, "the replica of rank " + std::to_string(hello.rank) + " needs " +
                                               std::to_string(need) + " bytes, over the budget of " +
                                               std::to_string(options.budget_bytes) + " (" +
                                               std::to_string(used - freed) + " in use)");
    auto region = context->allocate(need, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
    if (!region) return std::unexpected(region.error());
    auto fresh = std::make_shared<RankSlots>();
    fresh->region = std::move(*region);
    fresh->world_size = hello.world_size;
    fresh->bytes = hello.bytes;
    used = used - freed + need;
    entry = fresh;
    return fresh;
  }

  Message hello(const Message& m, std::shared_ptr<RankSlots>& slots, std::uint32_t& rank) {
    auto found = slots_for(m);
    if (!found) return reply(MessageType::HelloReply, found.error().message());
    slots = *found;
    rank = m.rank;
    std::lock_guard lock(slots->busy);
    auto out = reply(MessageType::HelloReply);
    out.text = slots->region->descriptor().to_hex();
    out.slot = slots->newest ? *slots->newest : 2;  // 2: none yet
    out.step = slots->step;
    return out;
  }

  Message commit(const Message& m, RankSlots& slots, std::uint32_t rank) {
    std::lock_guard lock(slots.busy);
    if (slots.newest && *slots.newest == m.slot)
      return reply(MessageType::CommitReply, "slot " + std::to_string(m.slot) + " holds the newest replica");
    auto manifest = checked_manifest(slots, rank, m);
    if (manifest)
      if (auto ok = verify_slot(slots, m.slot, *manifest); !ok) manifest = std::unexpected(ok.error());
    if (!manifest) {
      log::warn("ckpt", "serve: rank " + std::to_string(rank) + " step " + std::to_string(m.step) +
                            " refused: " + manifest.error().message());
      return reply(MessageType::CommitReply, manifest.error().message());
    }
    slots.newest = m.slot;
    slots.step = m.step;
    slots.manifest_bytes = m.manifest_bytes;
    persist(slots, rank, *manifest);
    return reply(MessageType::CommitReply);
  }

  // --persist: the same pipeline as the engine's, into <dir>/rank-<r>/ (rank and world size recorded).
  void persist(const RankSlots& slots, std::uint32_t rank, const Manifest& manifest) {
    if (!ring) return;
    EngineOptions o = persist_options;
    o.directory += "/" + data_file_name(rank).substr(0, 10);
    o.rank = rank;
    o.world_size = slots.world_size;
    if (auto ok = make_directory(o.directory); !ok) return log::error("ckpt", ok.error().describe());
    PersistJob job{o.directory,
                   manifest.step,
                   manifest.time_ns,
                   slots.slot_data(*slots.newest),
                   slots.bytes,
                   manifest.tensors,
                   &o,
                   &warned_buffered};
    if (auto done = persist_checkpoint(*ring, job); !done)
      log::error("ckpt", "serve: persisting rank " + std::to_string(rank) + ": " + done.error().describe());
  }

  Message fetch(RankSlots& slots) {
    std::lock_guard lock(slots.busy);
    if (!slots.newest) return reply(MessageType::FetchReply, "no replica");
    auto out = reply(MessageType::FetchReply);
    out.slot = *slots.newest;
    out.step = slots.step;
    out.bytes = slots.bytes;
    out.manifest_bytes = slots.manifest_bytes;
    return out;
  }

  Message handle(const Message& m, std::shared_ptr<RankSlots>& slots, std::uint32_t& rank) {
    if (m.type == MessageType::Hello) return hello(m, slots, rank);
    if (!slots) return reply(MessageType::CommitReply, "no Hello yet");
    if (m.type == MessageType::Commit) return commit(m, *slots, rank);
    if (m.type == MessageType::Fetch) return fetch(*slots);
    return reply(MessageType::CommitReply, "unexpected message");
  }

  void serve_connection(std::shared_ptr<Connection> connection) {
    auto channel = Channel::create(*context, connection, 0);
    if (!channel) return;
    std::shared_ptr<RankSlots> slots;
    std::uint32_t rank = 0;
    while (!stop) {
      auto message = channel->receive(kPoll);
      if (!message && message.error().code() == Errc::Timeout) continue;
      if (!message) return;  // the peer left or sent garbage: its connection ends, the replicas stay
      if (auto ok = channel->expect(); !ok) return;
      if (auto ok = channel->send(handle(*message, slots, rank)); !ok) return;
    }
  }

  void accept_loop() {
    while (!stop) {
      auto connection = listener->accept(kPoll);
      if (!connection) continue;
      std::lock_guard lock(threads_mutex);
      connections.emplace_back([this, c = std::move(*connection)] { serve_connection(c); });
    }
  }
};

Result<std::unique_ptr<ReplicaServer>> ReplicaServer::create(const ServeOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  Options context_options;
  if (!options.transport.empty()) context_options.transport = options.transport;
  auto context = Context::open(context_options);
  if (!context) return std::unexpected(context.error());
  impl->context = std::move(*context);
  auto listener = impl->context->listen(options.listen);
  if (!listener) return std::unexpected(listener.error());
  impl->listener = std::move(*listener);
  if (!options.persist_directory.empty()) {
    auto ring = Ring::create(4);
    if (!ring) return std::unexpected(ring.error());
    impl->ring.emplace(std::move(*ring));
    auto persist =
        resolve_engine_options(EngineOptions{.directory = options.persist_directory, .keep = options.keep});
    if (!persist) return std::unexpected(persist.error());
    impl->persist_options = std::move(*persist);
  }
  impl->acceptor = std::jthread([raw = impl.get()] { raw->accept_loop(); });
  return std::unique_ptr<ReplicaServer>(new ReplicaServer(std::move(impl)));
}

ReplicaServer::ReplicaServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ReplicaServer::~ReplicaServer() {
  impl_->stop = true;
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  std::lock_guard lock(impl_->threads_mutex);
  for (auto& t : impl_->connections)
    if (t.joinable()) t.join();
}

std::string ReplicaServer::address() const { return impl_->listener->address(); }

std::optional<ReplicaInfo> ReplicaServer::newest(std::uint32_t rank) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->ranks.find(rank);
  if (it == impl_->ranks.end()) return std::nullopt;
  std::lock_guard busy(it->second->busy);
  if (!it->second->newest) return std::nullopt;
  return ReplicaInfo{it->second->step, it->second->bytes};
}

std::uint64_t ReplicaServer::used_bytes() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->used;
}

}  // namespace rdmakit::ckpt
