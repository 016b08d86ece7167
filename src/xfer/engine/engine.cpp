// The engine's control path: rails, publishing segments, resolving names and connecting to their owners.
#include <unistd.h>

#include <algorithm>
#include <random>

#include "bootstrap/peer_proof.hpp"
#include "core/log.hpp"
#include "rdmakit/transports.hpp"
#include "xfer/engine/engine_impl.hpp"

namespace rdmakit::xfer {

// Out of line: the destructor is the key function, so the vtable is emitted (and exported) from this one
// file in every build type, not wherever an optimizer happens to keep it (abi/librdmakit.symbols).
Engine::~Engine() = default;
Batch::~Batch() = default;
PreparedBatch::~PreparedBatch() = default;

Result<std::unique_ptr<Engine>> Engine::create(MetadataStore& metadata, const EngineOptions& options) {
  if (options.transports.empty()) return fail(Errc::InvalidArgument, "xfer engine: no transport");
  if (options.connections_per_rail == 0 || options.max_inflight_per_peer == 0 ||
      options.max_inflight_per_rail == 0 || options.stripe_bytes == 0) {
    return fail(Errc::InvalidArgument,
                "xfer engine: connections_per_rail, max_inflight_per_peer, max_inflight_per_rail and "
                "stripe_bytes must be positive");
  }
  // A forced transport this engine does not offer could never be chosen: every request would fail later.
  if (!options.transport.empty() &&
      std::ranges::find(options.transports, options.transport) == options.transports.end()) {
    return fail(Errc::InvalidArgument,
                "xfer engine: transport '" + options.transport + "' is not one of the engine's transports");
  }
  auto engine = std::make_unique<detail::EngineImpl>(metadata, options);
  if (auto started = engine->start(); !started) return std::unexpected(started.error());
  return std::unique_ptr<Engine>(std::move(engine));
}

namespace detail {
namespace {

std::string default_name() {
  std::random_device random;
  return "xfer-" + std::to_string(::getpid()) + "-" + std::to_string(random());
}

// Proofs running at once on one rail's listener: more connections wait in the listener's backlog.
constexpr std::size_t kMaxProving = 16;

// Whether `transport` opens one of several devices (one rail per device, EngineOptions::verbs_devices), as
// its registration declares.
bool picks_device(std::string_view transport) {
  auto built = built_transports();
  auto it = std::ranges::find(built, transport, &TransportInfo::name);
  return it != built.end() && it->picks_device;
}

}  // namespace

bool Peer::healthy() const {
  return std::ranges::all_of(links, [](const auto& link) { return link->connection->health().has_value(); });
}

// The file link stays: it has a connection of its own and connects again when it needs to, so entries that
// still hold this peer after its data connections failed keep reaching the owner's files.
void Peer::close() {
  for (auto& link : links) link->connection->close();
}

EngineImpl::EngineImpl(MetadataStore& metadata, EngineOptions options)
    : metadata_(metadata), options_(std::move(options)), host_(host_id()) {
  if (options_.name.empty()) options_.name = default_name();
}

Result<void> EngineImpl::start() {
  if (options_.name.size() > kMaxEngineName)
    return fail(Errc::InvalidArgument, "xfer engine: name '" + options_.name + "' is longer than " +
                                           std::to_string(kMaxEngineName) + " bytes");
  // Control characters are refused: the proofs mark notification and file connections with one (\x1f), and
  // a name that carried it could pass a data connection off as one of those.
  if (std::ranges::any_of(options_.name, [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
    return fail(Errc::InvalidArgument, "xfer engine: a name has no control characters");
  auto secret = engine_secret(options_.listen_address);
  if (!secret) return std::unexpected(secret.error());
  secret_ = std::move(*secret);
  for (const auto& transport : options_.transports) {
    if (std::ranges::find(transports_, transport, &detail::OfferedTransport::name) != transports_.end())
      continue;
    std::vector<std::string> devices{""};
    if (picks_device(transport) && !options_.verbs_devices.empty()) devices = options_.verbs_devices;
    for (const auto& device : devices) {
      if (auto opened = open_rail(transport, device); !opened) return opened;
    }
    const Capabilities& caps = rails_.back()->caps;
    transports_.push_back(
        {.name = transport, .same_host_only = caps.same_host_only, .kernel_bypass = caps.kernel_bypass});
  }
  auto names = std::make_shared<std::vector<std::string>>();
  for (const auto& offered : transports_) names->push_back(offered.name);
  names->push_back("file");
  path_names_ = std::move(names);
  for (auto& rail : rails_) {
    rail->progress = std::thread([this, r = rail.get()] { progress_loop(*r); });
    rail->acceptor = std::thread([this, r = rail.get()] { accept_loop(*r); });
  }
  retry_thread_ = std::thread([this] { retry_loop(); });
  notify_thread_ = std::thread([this] { notify_loop(); });
  progress_handle_->engine = this;
  return {};
}

Result<void> EngineImpl::open_rail(const std::string& transport, const std::string& device) {
  Options context_options{.transport = transport,
                          .name = options_.name,
                          .timeout = options_.peer_timeout,
                          .connect_timeout = options_.connect_timeout};
  if (!device.empty()) context_options.set("device", device);  // the verbs option: which rail
  auto context = Context::open(context_options);
  if (!context) return std::unexpected(context.error());
  auto rail = std::make_unique<Rail>();
  rail->index = rails_.size();
  rail->transport = transport;
  rail->device = device;
  rail->context = *context;
  rail->caps = rail->context->capabilities();
  // listen_address is "host:port"; a transport whose addresses are names (shm) picks its own.
  auto listener = rail->context->listen(
      rail->caps.address_prefix.empty() ? std::string_view{options_.listen_address} : std::string_view{});
  if (!listener) return std::unexpected(listener.error());
  rail->listener = *listener;
  auto cq = rail->context->create_cq(options_.max_inflight_per_rail);
  if (!cq) return std::unexpected(cq.error());
  rail->cq = *cq;
  rail->credits = std::make_unique<Credits>(options_.max_inflight_per_rail);
  rails_.push_back(std::move(rail));
  return {};
}

// Peers connect to us to reach our segments; their operations need nothing from us but an open connection,
// which is kept only once the peer proved the secret (bootstrap/peer_proof.hpp). Until then the peer has
// no descriptor of ours (records are sealed), and the proof is bounded by connect_timeout.
void EngineImpl::accept_loop(Rail& rail) {
  while (!stop_.load(std::memory_order_acquire)) {
    auto connection = rail.listener->accept(std::chrono::milliseconds(100));
    std::erase_if(rail.proving, [](Rail::Proving& p) {
      if (!p.done->load(std::memory_order_acquire)) return false;
      p.thread.join();
      return true;
    });
    {
      std::lock_guard lock(rail.accepted_mutex);
      std::erase_if(rail.accepted, [](const auto& a) { return !a.connection->health().has_value(); });
    }
    if (!connection) continue;
    if (rail.proving.size() >= kMaxProving) {
      log::warn("xfer", "refused a connection on " + rail.listener->address() + ": " +
                            std::to_string(kMaxProving) + " peers are still proving the secret");
      (*connection)->close();
      continue;
    }
    start_proof(rail, std::move(*connection));
  }
  for (auto& p : rail.proving) p.connection->close();  // ends their waits at once
  for (auto& p : rail.proving) p.thread.join();
  rail.proving.clear();
}

void EngineImpl::start_proof(Rail& rail, std::shared_ptr<Connection> connection) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  bootstrap::PeerProofConfig config{secret_, std::string(kPeerProofLabel), options_.connect_timeout};
  auto thread = std::thread([this, &rail, connection, done, config = std::move(config)] {
    // A notification connection's receives are posted before the peer learns it was accepted
    // (before_accept), so its first notification finds one; a peer that did not prove the secret never
    // gets any, and a data connection none either.
    // A file connection's channel likewise, and only while this engine serves files.
    std::unique_ptr<rdmakit::detail::MessageChannel> channel, file_channel;
    auto proven = bootstrap::prove_accept(
        *rail.context, *connection, config, options_.name, [&](std::string_view initiator) -> Result<void> {
          if (initiator.ends_with(kFileIdentitySuffix)) {
            if (!file_server())
              return fail(Errc::NotFound, "xfer: '" + options_.name + "' publishes no file segment");
            auto opened = open_file_server_channel(*rail.context, connection);
            if (!opened) return std::unexpected(opened.error());
            file_channel = std::move(*opened);
            return {};
          }
          if (!initiator.ends_with(kNotifyIdentitySuffix)) return {};
          auto opened = open_owner_channel(*rail.context, connection);
          if (!opened) return std::unexpected(opened.error());
          channel = std::move(*opened);
          return {};
        });
    if (proven && file_channel) {
      std::string name = std::move(*proven);
      name.resize(name.size() - kFileIdentitySuffix.size());
      adopt_file_connection(rail, connection, std::move(name), std::move(file_channel));
    } else if (proven) {
      std::string name = std::move(*proven);
      if (channel) name.resize(name.size() - kNotifyIdentitySuffix.size());
      std::lock_guard lock(rail.accepted_mutex);
      rail.accepted.push_back({connection, std::move(name), std::move(channel)});
    } else {
      log::info("xfer", "closed a connection on " + rail.listener->address() +
                            " whose peer did not prove the secret: " + proven.error().message());
    }
    done->store(true, std::memory_order_release);
  });
  rail.proving.push_back({std::move(connection), std::move(done), std::move(thread)});
}

Result<std::shared_ptr<Connection>> EngineImpl::connect_to_owner(Rail& rail, const std::string& address,
                                                                 const std::string& owner,
                                                                 std::string_view marker) {
  auto connection = rail.context->connect(address, ConnectOptions{});
  if (!connection) return std::unexpected(connection.error());
  bootstrap::PeerProofConfig config{secret_, std::string(kPeerProofLabel), options_.connect_timeout};
  auto identity =
      bootstrap::prove_initiate(*rail.context, **connection, config, options_.name + std::string(marker));
  if (!identity) {
    (*connection)->close();
    return std::unexpected(identity.error());
  }
  if (*identity != owner) {
    (*connection)->close();
    return fail(Errc::ConnectionRefused, "xfer: the peer at " + address + " proved the secret as '" +
                                             *identity + "', not as the segment's owner '" + owner + "'");
  }
  return *connection;
}

EngineImpl::~EngineImpl() {
  {
    std::unique_lock lock(progress_handle_->mutex);
    progress_handle_->engine = nullptr;
  }
  {
    std::lock_guard lock(control_);
    for (auto& [name, region] : published_) (void)metadata_.unpublish(segment_key(name));
    for (const auto& name : published_files_) (void)metadata_.unpublish(segment_key(name));
    for (auto& [key, peer] : peers_) {
      peer->close();
      close_file_link(*peer);
    }
  }
  {
    std::shared_lock lock(table_);
    for (const auto& entry : entries_) {
      if (entry && entry->peer) {
        entry->peer->close();
        close_file_link(*entry->peer);
      }
    }
  }
  {
    // Its reads in flight end and what it still had queued fails, as the owners' links did above. Stopped,
    // not destroyed: a callback it runs may submit meanwhile, and then finds it stopped.
    LocalFileReader* reader = nullptr;
    {
      std::lock_guard lock(local_reader_mutex_);
      reader = local_reader_.get();
      local_reader_failed_ = true;  // none is started from now on
    }
    if (reader != nullptr) reader->stop();
  }
  stop_.store(true, std::memory_order_release);
  retry_ready_.notify_all();
  for (auto& rail : rails_) {
    std::lock_guard lock(rail->idle_mutex);
    rail->work_posted.notify_all();
  }
  if (retry_thread_.joinable()) retry_thread_.join();
  if (notify_thread_.joinable()) notify_thread_.join();
  for (auto& rail : rails_) {
    if (rail->acceptor.joinable()) rail->acceptor.join();
    if (rail->progress.joinable()) rail->progress.join();
    std::lock_guard lock(rail->accepted_mutex);
    for (auto& accepted : rail->accepted) accepted.connection->close();
  }
  {
    // No proof adopts a file connection any more (the acceptors are joined): the server stops, closing its
    // connections, before the rails its ring is registered in go.
    std::lock_guard lock(files_mutex_);
    file_server_.reset();
  }
  // Work requests whose completions did not come within the drain: their requests fail, so no batch that
  // outlives the engine waits forever.
  Error closed(Errc::ConnectionBroken, "xfer engine closed with the request in flight");
  for (auto& rail : rails_) {
    std::lock_guard lock(rail->ops_mutex);
    for (auto& [last, chain] : rail->chains)
      for (auto k = chain.done; k < chain.count; ++k) fail_op(*chain.batch, chain.begin + k, closed);
    rail->chains.clear();
  }
}

Result<std::shared_ptr<Peer>> EngineImpl::connect_peer(const SegmentRecord& record,
                                                       const std::string& transport) {
  auto remote = rails_of(record, transport);
  std::vector<Rail*> local;
  for (auto& rail : rails_) {
    if (rail->transport == transport) local.push_back(rail.get());
  }
  auto peer = std::make_shared<Peer>(options_.max_inflight_per_peer);
  peer->owner = record.owner;
  // Rail i of ours pairs with rail i of theirs (devices striped pairwise), connections_per_rail each.
  auto pairs = std::min(local.size(), remote.size());
  for (std::uint32_t c = 0; c < options_.connections_per_rail; ++c) {
    for (std::size_t i = 0; i < pairs; ++i) {
      auto connection =
          local[i]->context->connect(remote[i]->address, ConnectOptions{.send_cq = local[i]->cq});
      if (!connection) {
        peer->close();
        return std::unexpected(connection.error());
      }
      if (auto proven = prove_owner(*local[i], **connection, record.owner, remote[i]->address); !proven) {
        (*connection)->close();
        peer->close();
        return std::unexpected(proven.error());
      }
      peer->links.push_back(std::make_unique<Link>(Link{local[i], i, std::move(*connection)}));
    }
  }
  return peer;
}

// The proof's SEND completes on the rail's shared queue: we hold the rail's reaper lock meanwhile, so no
// reaper takes that completion for one of its chains (Connection::wait picks it out and leaves the others
// queued), and a rail credit, so the queue keeps room for it.
Result<void> EngineImpl::prove_owner(Rail& rail, Connection& connection, const std::string& owner,
                                     const std::string& address) {
  auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
  if (rail.credits->acquire(1, deadline) == 0)
    return fail(Errc::ResourceExhausted, "xfer: no room on the rail's queue to prove the secret to '" +
                                             owner + "' (max_inflight_per_rail)");
  Result<std::string> identity =
      fail(Errc::Timeout, "the rail's completions stayed busy for the whole connect_timeout");
  {
    // Polled rather than blocked on: a batch callback (run by a reaper holding this lock) that opens a
    // segment gets a Timeout instead of a deadlock.
    std::unique_lock reaper(rail.reap_mutex, std::defer_lock);
    while (!reaper.try_lock() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (reaper.owns_lock()) {
      bootstrap::PeerProofConfig config{secret_, std::string(kPeerProofLabel), options_.connect_timeout};
      identity = bootstrap::prove_initiate(*rail.context, connection, config, options_.name);
    }
  }
  rail.credits->release(1);
  if (!identity)
    return std::unexpected(Error(identity.error().code(), "xfer: the owner '" + owner + "' at " + address +
                                                              ": " + identity.error().message()));
  // The record names the owner; the one listening there must prove it is that owner (the secret binds the
  // name), or the record's address leads to someone else.
  if (*identity != owner)
    return fail(Errc::ConnectionRefused, "xfer: the peer at " + address + " proved the secret as '" +
                                             *identity + "', not as the segment's owner '" + owner + "'");
  return {};
}

Result<std::shared_ptr<Peer>> EngineImpl::peer_for(const SegmentRecord& record,
                                                   const std::string& transport) {
  // Keyed by every address too: only an owner at those addresses that proved its name is reused.
  auto key = record.owner + "/" + transport + "/" +
             std::to_string(rails_of(record, transport).front()->region.owner_epoch);
  for (const auto* rail : rails_of(record, transport)) key += "/" + rail->address;
  if (auto it = peers_.find(key); it != peers_.end()) {
    if (it->second->healthy()) return it->second;
    it->second->close();
    peers_.erase(it);
  }
  auto peer = connect_peer(record, transport);
  if (!peer) return peer;
  (*peer)->key = key;
  peers_[key] = *peer;
  return peer;
}

// Looks `name` up and connects to its owner. With `previous` (a re-resolve), an unchanged record reuses the
// peer when it is healthy and reconnects when it is not.
Result<std::shared_ptr<const SegmentEntry>> EngineImpl::resolve(std::string_view name,
                                                                std::uint64_t generation,
                                                                const SegmentEntry* previous) {
  resolves_.fetch_add(1, std::memory_order_relaxed);
  auto entry = std::make_shared<SegmentEntry>();
  entry->name = std::string(name);
  entry->generation = generation;
  auto value = metadata_.lookup(segment_key(name));
  if (!value) return std::unexpected(value.error());
  if (!*value) {
    entry->gone = true;
    if (previous != nullptr && previous->peer) entry->record = previous->record;
    return entry;
  }
  // Nothing of a record is used (nor cached) before it verified.
  auto record = open_sealed(**value, name, secret_);
  if (!record)
    return std::unexpected(
        Error(record.error().code(), "segment '" + entry->name + "': " + record.error().message()));
  auto transport = choose_transport(transports_, host_, *record, options_.transport);
  if (!transport) return std::unexpected(transport.error());
  auto peer = peer_for(*record, *transport);
  if (!peer) return std::unexpected(peer.error());
  entry->record = std::move(*record);
  entry->transport = *transport;
  entry->peer = *peer;
  for (const auto* rail : rails_of(entry->record, entry->transport)) entry->remote.push_back(rail->region);
  if (entry->record.file && options_.file_local_reads)
    entry->local_file = open_local_file(entry->record, boot_of(host_));
  return entry;
}

Result<SegmentHandle> EngineImpl::open_segment(std::string_view name) {
  std::lock_guard lock(control_);
  auto known = handles_.find(name);
  if (known != handles_.end()) {
    auto current = entry(known->second);
    if (!current->gone) return SegmentHandle{known->second};
  }
  auto resolved = resolve(name, next_generation_++, nullptr);
  if (!resolved) return std::unexpected(resolved.error());
  if ((*resolved)->gone) return fail(Errc::NotFound, "segment '" + std::string(name) + "' is not published");
  if (known != handles_.end()) {
    install(known->second, *resolved);
    return SegmentHandle{known->second};
  }
  std::uint32_t handle;
  {
    std::unique_lock table(table_);
    entries_.push_back(*resolved);
    handle = static_cast<std::uint32_t>(entries_.size());
  }
  handles_.emplace(std::string(name), handle);
  return SegmentHandle{handle};
}

Result<SegmentInfo> EngineImpl::segment_info(SegmentHandle segment) const {
  auto current = entry(segment.value);
  if (!current)
    return fail(Errc::InvalidArgument, "segment_info: no segment handle " + std::to_string(segment.value));
  if (current->gone) return fail(Errc::NotFound, "segment '" + current->name + "' is gone");
  return SegmentInfo{
      current->name,        current->record.owner,    current->record.length,        current->transport,
      current->record.file, current->record.writable, current->local_file != nullptr};
}

std::shared_ptr<const SegmentEntry> EngineImpl::entry(std::uint32_t handle) const {
  std::shared_lock lock(table_);
  if (handle == 0 || handle > entries_.size()) return nullptr;
  return entries_[handle - 1];
}

void EngineImpl::install(std::uint32_t handle, std::shared_ptr<const SegmentEntry> fresh) {
  std::unique_lock lock(table_);
  std::swap(entries_[handle - 1], fresh);
  lock.unlock();
  // The old entry goes outside the lock: when it held the last reference to its peer, the peer joins its
  // file link's thread, which may be running a batch callback that submits (and so reads the table).
  fresh.reset();
}

std::shared_ptr<LocalRegion> EngineImpl::find_local(std::uint64_t addr, std::uint64_t length) const {
  std::shared_lock lock(table_);
  auto it = locals_.upper_bound(addr);
  if (it == locals_.begin()) return nullptr;
  const auto& region = std::prev(it)->second;
  if (addr - region->addr > region->size || length > region->size - (addr - region->addr)) return nullptr;
  return region;
}

EngineStats EngineImpl::stats() const {
  EngineStats s;
  s.requests = requests_.load(), s.work_requests = work_requests_.load(), s.coalesced = coalesced_.load();
  s.retries = retries_.load(), s.resolves = resolves_.load();
  s.notifications_received = notifications_received_.load();
  s.notifications_dropped = notifications_dropped_.load();
  s.notifications_refused = notifications_refused_.load();
  for (const auto& rail : rails_)
    s.rails.push_back({rail->transport, rail->device, rail->work_requests.load()});
  std::shared_lock lock(table_);
  for (const auto& e : entries_) {
    if (e && e->peer) s.peak_inflight_per_peer = std::max(s.peak_inflight_per_peer, e->peer->credits.peak());
  }
  return s;
}

}  // namespace detail
}  // namespace rdmakit::xfer
