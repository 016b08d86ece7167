// `rdmakit-ckpt serve`: holds the newest complete replica of each rank in memory it registered.
//
// Threads: one acceptor, four provers (each new connection proves the secret there, bounded by
// proof_timeout_ms, so a silent stranger holds a prover at most that long) and one progress thread that
// serves every proven connection by polling their receive queues, sleeping when none has anything (an idle
// connection costs a poll per wake-up, not a thread). All are joined by the destructor.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/peer_proof.hpp"
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
constexpr auto kIdleSleepMax = std::chrono::milliseconds(20);
constexpr auto kPushPoll = std::chrono::microseconds(100);  // while a rank pushes (Progress seen)
constexpr std::uint64_t kVerifySlice = 8ull << 20;  // checksummed between two polls of the connections
constexpr int kProvers = 4;  // proofs in parallel: each silent stranger holds one up to proof_timeout_ms
constexpr auto kPopulateFor = std::chrono::milliseconds(1000);  // of a rank's new slots, at its Hello

// One rank's two slots; `newest` is the slot holding its newest committed replica (verified, or being
// verified: newest_verified). Its bytes count against
// the budget from before the allocation until the region is freed (the destructor gives them back), so
// the count is the memory really held, whoever still holds a reference.
struct RankSlots {
  std::shared_ptr<std::atomic<std::uint64_t>> used;
  std::uint64_t reserved = 0;
  std::shared_ptr<MemoryRegion> region;
  std::uint32_t world_size = 0;
  std::uint64_t bytes = 0;
  std::optional<std::uint32_t> newest;
  std::uint64_t step = 0;
  std::string manifest_text;  // the newest's manifest as committed, kept here where no peer can write
  Manifest manifest;
  std::string mac;          // the client's MAC over it (replica.hpp), returned with Fetch
  mutable std::mutex busy;  // newest/step for newest() against the progress thread
  // The replica before the newest, in the other slot, until a push overwrites it (checked before it is
  // served, like the newest): a multi-rank restore may agree on the step before a replica pushed for a
  // checkpoint that was never committed.
  struct Older {
    std::uint32_t slot = 0;
    std::uint64_t step = 0;
    std::string manifest_text;
    Manifest manifest;
    std::string mac;
  };
  std::optional<Older> older;
  // The newest is accepted at its Commit without reading its bytes (the manifest, under the writer's MAC,
  // carries every chunk's checksum): the progress thread verifies it while no rank is pushing, from chunk
  // `verify_next` on, so the check never competes with a push for the CPU. One that does not verify is
  // dropped and the replica before it takes its place (verified in turn). Fetch verifies in full anyway.
  bool newest_verified = false;
  std::size_t verify_next = 0;
  bool queued = false;  // in Impl::unverified

  ~RankSlots() {
    region.reset();
    if (used) *used -= reserved;
  }
  std::uint64_t slot_offset(std::uint32_t slot) const { return slot * replica_slot_bytes(bytes); }
  unsigned char* slot_data(std::uint32_t slot) const {
    return static_cast<unsigned char*>(region->data()) + slot_offset(slot);
  }
  std::string_view manifest_area(std::uint32_t slot, std::uint64_t size) const {
    return {reinterpret_cast<const char*>(slot_data(slot) + round_up(bytes, kIoAlignment)), size};
  }
};

// A proven connection: its rank is the one its proof named.
struct Session {
  std::shared_ptr<Connection> connection;
  Channel channel;
  std::uint32_t rank = 0;
  std::shared_ptr<RankSlots> slots;  // after a Hello
  // When a Progress came and its Commit has not yet: the next message is due soon (for a second at most:
  // a client that stops mid-push does not keep the server polling).
  std::optional<std::chrono::steady_clock::time_point> pushing_since;
  bool pushing() const {
    return pushing_since && std::chrono::steady_clock::now() - *pushing_since < std::chrono::seconds(1);
  }
};

Message reply(MessageType type, std::string error = {}) {
  return Message{.type = type, .status = error.empty() ? 0u : 1u, .text = std::move(error)};
}

// The manifest a client wrote after its data, decoded and checked against what the server knows.
Result<Manifest> checked_manifest(const RankSlots& slots, std::uint32_t rank, const Message& commit) {
  if (commit.slot > 1) return fail(Errc::ProtocolError, "no such slot");
  if (commit.manifest_bytes == 0 || commit.manifest_bytes > kReplicaManifestArea)
    return fail(Errc::ProtocolError, "the manifest's size does not fit its area");
  if (commit.text.size() != 2 * bootstrap::auth::kMacSize)
    return fail(Errc::ProtocolError, "a commit carries the manifest's MAC");
  auto manifest = decode_manifest(slots.manifest_area(commit.slot, commit.manifest_bytes));
  if (!manifest) return manifest;
  if (manifest->rank != rank || manifest->world_size != slots.world_size || manifest->step != commit.step ||
      manifest->files.size() != 1 || manifest->files[0].size != slots.bytes)
    return fail(Errc::ProtocolError, "the manifest does not describe this rank's replica");
  for (const auto& c : manifest->chunks)
    if (c.source_step) return fail(Errc::ProtocolError, "a replica holds every chunk (no references)");
  return manifest;
}

// Every chunk's checksum against the slot's bytes.
Result<void> verify_slot(const RankSlots& slots, std::uint32_t slot, const Manifest& manifest) {
  for (std::size_t i = 0; i < manifest.chunks.size(); ++i) {
    const auto& c = manifest.chunks[i];
    if (checksum64(slots.slot_data(slot) + c.offset, c.size) != c.checksum)
      return fail(Errc::ProtocolError, "checksum mismatch in chunk " + std::to_string(i));
  }
  return {};
}

}  // namespace

// Hidden although nested in an exported class (which would make it default): the implementation is no part of
// the ABI (docs/abi.md), nor are its members or the lambdas they hold.
struct __attribute__((visibility("hidden"))) ReplicaServer::Impl {
  ServeOptions options;
  std::shared_ptr<Context> context;
  std::shared_ptr<Listener> listener;
  bootstrap::PeerProofConfig proof;
  std::optional<Ring> ring;  // --persist
  EngineOptions persist_options;
  bool warned_buffered = false;

  std::shared_ptr<std::atomic<std::uint64_t>> used = std::make_shared<std::atomic<std::uint64_t>>(0);
  mutable std::mutex mutex;  // ranks
  std::map<std::uint32_t, std::shared_ptr<RankSlots>> ranks;
  std::atomic<bool> stop = false;
  std::atomic<std::uint32_t> live = 0;  // connections proving or proven

  std::mutex queue_mutex;  // unproven (for the provers) and proven (for the progress thread)
  std::condition_variable queue_changed;
  struct Unproven {
    std::shared_ptr<Connection> connection;
    std::chrono::steady_clock::time_point deadline;  // accepted + proof_timeout_ms
  };
  std::deque<Unproven> unproven;
  std::vector<Session> proven;

  // The progress thread's own: every proven connection, and which one owns each rank.
  std::list<Session> sessions;
  std::map<std::uint32_t, const Session*> owners;
  std::deque<std::shared_ptr<RankSlots>> unverified;  // newest replicas accepted, not yet verified

  std::vector<std::jthread> provers;
  std::jthread progress;
  std::jthread acceptor;

  std::uint64_t rank_cap() const {
    return options.max_rank_bytes ? std::min(options.max_rank_bytes, options.budget_bytes)
                                  : options.budget_bytes;
  }

  // A rank's slots of this shape: the ones it has (kept for a restarted process), else new ones, whose
  // bytes are reserved before anything is allocated. Slots of another shape are dropped first, so a
  // re-Hello with another size frees the old ones. Refusals sent to peers carry no sizes (logged here).
  Result<std::shared_ptr<RankSlots>> slots_for(Session& session, const Message& hello) {
    if (hello.world_size == 0 || hello.rank >= hello.world_size || hello.bytes == 0 ||
        hello.bytes > kMaxReplicaBytes)
      return fail(Errc::InvalidArgument, "bad rank, world size or size");
    std::lock_guard lock(mutex);
    auto found = ranks.find(hello.rank);
    if (found != ranks.end() && found->second->world_size == hello.world_size &&
        found->second->bytes == hello.bytes)
      return found->second;
    session.slots.reset();
    if (found != ranks.end()) ranks.erase(found);  // frees the old region: only the map and owner held it
    std::uint64_t need = 2 * replica_slot_bytes(hello.bytes);
    std::uint64_t in_use = *used;
    if (need > rank_cap() || in_use + need > options.budget_bytes) {
      log::warn("ckpt", "serve: rank " + std::to_string(hello.rank) + " refused: its replica needs " +
                            std::to_string(need) + " bytes, over the budget of " +
                            std::to_string(options.budget_bytes) + " (" + std::to_string(in_use) +
                            " in use, at most " + std::to_string(rank_cap()) + " per rank)");
      return fail(Errc::ResourceExhausted, "the replica is over the budget of the server");
    }
    auto fresh = std::make_shared<RankSlots>();
    *used += need;  // reserved first: the destructor gives it back, allocated or not
    fresh->used = used;
    fresh->reserved = need;
    auto region = context->allocate(need, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
    if (!region) {
      log::warn("ckpt", "serve: allocating the replica of rank " + std::to_string(hello.rank) + ": " +
                            region.error().describe());
      return fail(Errc::ResourceExhausted, "the server could not allocate the replica");
    }
    fresh->region = std::move(*region);
    populate(*fresh);
    fresh->world_size = hello.world_size;
    fresh->bytes = hello.bytes;
    ranks[hello.rank] = fresh;
    return fresh;
  }

  // New slots are faulted in now rather than page by page under the first push (that took a third of the
  // CPU of four concurrent pushes: perf, bench-cluster), here on the progress thread, before any push can
  // write them. For at most kPopulateFor per Hello, so that other ranks' messages (and Hellos, which have a
  // timeout) never wait long: slots of many GiB are faulted in partly, the rest at their first push.
  void populate(const RankSlots& slots) {
    constexpr std::uint64_t kStep = 64ull << 20;
    auto until = std::chrono::steady_clock::now() + kPopulateFor;
    auto* data = static_cast<unsigned char*>(slots.region->data());
    for (std::uint64_t at = 0; at < slots.reserved && std::chrono::steady_clock::now() < until; at += kStep)
      if (!populate_for_writing(data + at, std::min(kStep, slots.reserved - at))) return;
  }

  Message hello(const Message& m, Session& session) {
    if (m.rank != session.rank)
      return reply(MessageType::HelloReply, "the rank differs from the one this connection proved");
    // An owner whose connection already failed is as good as gone (its session is dropped at its next poll).
    auto owner = owners.find(session.rank);
    if (owner != owners.end() && owner->second != &session && owner->second->connection->health())
      return reply(MessageType::HelloReply, "another live connection owns this rank's replicas");
    auto found = slots_for(session, m);
    if (!found) return reply(MessageType::HelloReply, found.error().message());
    session.slots = *found;
    owners[session.rank] = &session;
    auto& slots = *session.slots;
    auto out = reply(MessageType::HelloReply);
    out.text = slots.region->descriptor().to_hex();
    out.slot = slots.newest ? *slots.newest : 2;  // 2: none yet
    out.step = slots.step;
    return out;
  }

  // Accepts a replica whose manifest fits this rank; its bytes are verified later (verify_some), or here with
  // --persist, which reads them anyway and must never write to disk what does not verify.
  Message commit(const Message& m, const std::shared_ptr<RankSlots>& held, std::uint32_t rank) {
    auto& slots = *held;
    if (slots.newest && *slots.newest == m.slot)
      return reply(MessageType::CommitReply, "that slot holds the newest replica");
    auto manifest = checked_manifest(slots, rank, m);
    if (manifest && ring)
      if (auto ok = verify_slot(slots, m.slot, *manifest); !ok) manifest = std::unexpected(ok.error());
    if (!manifest) {
      log::warn("ckpt", "serve: rank " + std::to_string(rank) + " step " + std::to_string(m.step) +
                            " refused: " + manifest.error().message());
      return reply(MessageType::CommitReply, manifest.error().message());
    }
    if (slots.newest)
      slots.older = RankSlots::Older{*slots.newest, slots.step, std::move(slots.manifest_text),
                                     std::move(slots.manifest), std::move(slots.mac)};
    else
      slots.older.reset();
    {
      std::lock_guard lock(slots.busy);
      slots.newest = m.slot;
      slots.step = m.step;
    }
    slots.manifest_text = std::string(slots.manifest_area(m.slot, m.manifest_bytes));
    slots.manifest = std::move(*manifest);
    slots.mac = m.text;
    slots.newest_verified = ring.has_value();
    slots.verify_next = 0;
    if (!slots.newest_verified && !slots.queued) {
      slots.queued = true;
      unverified.push_back(held);
    }
    persist(slots, rank);
    return reply(MessageType::CommitReply);
  }

  // The newest replica did not verify: the one before it (if any) becomes the newest, to be verified in turn.
  void drop_newest(RankSlots& slots, const std::string& why) {
    log::warn("ckpt",
              "serve: the replica of rank " + std::to_string(slots.manifest.rank) + " step " +
                  std::to_string(slots.step) + " does not verify (" + why + "); dropped" +
                  (slots.older ? ", step " + std::to_string(slots.older->step) + " is the newest" : ""));
    std::lock_guard lock(slots.busy);
    slots.newest.reset();
    slots.newest_verified = false;
    slots.verify_next = 0;
    if (!slots.older) return;
    slots.newest = slots.older->slot;
    slots.step = slots.older->step;
    slots.manifest_text = std::move(slots.older->manifest_text);
    slots.manifest = std::move(slots.older->manifest);
    slots.mac = std::move(slots.older->mac);
    slots.older.reset();
  }

  // Verifies up to `budget` bytes of the newest replicas accepted unverified; true while some remain.
  bool verify_some(std::uint64_t budget) {
    while (!unverified.empty() && budget > 0) {
      auto& slots = *unverified.front();
      const auto& chunks = slots.manifest.chunks;
      while (slots.newest && !slots.newest_verified && budget > 0) {
        if (slots.verify_next == chunks.size()) {
          slots.newest_verified = true;
          break;
        }
        const auto& c = chunks[slots.verify_next];
        if (checksum64(slots.slot_data(*slots.newest) + c.offset, c.size) != c.checksum) {
          drop_newest(slots, "checksum mismatch in chunk " + std::to_string(slots.verify_next));
          continue;  // the one before, if any, from its first chunk
        }
        budget -= std::min(budget, c.size);
        ++slots.verify_next;
      }
      if (slots.newest && !slots.newest_verified) return true;
      slots.queued = false;
      unverified.pop_front();
    }
    return !unverified.empty();
  }

  // --persist: the same pipeline as the engine's, into <dir>/rank-<r>/ (rank and world size recorded;
  // the number at least 5 digits and never cut, so no two ranks share a directory).
  void persist(const RankSlots& slots, std::uint32_t rank) {
    if (!ring) return;
    EngineOptions o = persist_options;
    auto name = data_file_name(rank);
    o.directory += "/" + name.substr(0, name.rfind('.'));
    o.rank = rank;
    o.world_size = slots.world_size;
    if (auto ok = make_directory(o.directory, file_modes(o.shared_group.value_or(false)).directory); !ok)
      return log::error("ckpt", ok.error().describe());
    PersistJob job{o.directory,
                   slots.manifest.step,
                   slots.manifest.time_ns,
                   slots.slot_data(*slots.newest),
                   slots.bytes,
                   slots.manifest.tensors,
                   &o,
                   &warned_buffered};
    if (auto done = persist_checkpoint(*ring, job); !done)
      log::error("ckpt", "serve: persisting rank " + std::to_string(rank) + ": " + done.error().describe());
  }

  // The newest (or, asked by step, the one before it) is in memory peers may write: before it is offered
  // again its manifest area and every chunk are checked against the copy kept here; one that no longer
  // matches is dropped, not served.
  Message fetch(RankSlots& slots, std::uint32_t rank, std::optional<std::uint64_t> step) {
    bool want_older =
        step && slots.older && slots.older->step == *step && !(slots.newest && slots.step == *step);
    if (want_older) {
      auto& older = *slots.older;
      bool intact = slots.manifest_area(older.slot, older.manifest_text.size()) == older.manifest_text &&
                    verify_slot(slots, older.slot, older.manifest).has_value();
      if (!intact) {
        slots.older.reset();
        return reply(MessageType::FetchReply, "no intact replica of step " + std::to_string(*step));
      }
      auto out = reply(MessageType::FetchReply);
      out.slot = older.slot;
      out.step = older.step;
      out.bytes = slots.bytes;
      out.manifest_bytes = older.manifest_text.size();
      out.text = older.mac;
      return out;
    }
    if (!slots.newest) return reply(MessageType::FetchReply, "no replica");
    if (step && slots.step != *step)
      return reply(MessageType::FetchReply, "no replica of step " + std::to_string(*step));
    auto slot = *slots.newest;
    bool intact = slots.manifest_area(slot, slots.manifest_text.size()) == slots.manifest_text &&
                  verify_slot(slots, slot, slots.manifest).has_value();
    if (!intact) {
      log::warn("ckpt", "serve: the replica of rank " + std::to_string(rank) + " step " +
                            std::to_string(slots.step) +
                            (slots.newest_verified ? " was overwritten after its commit; dropped"
                                                   : " does not verify; dropped"));
      std::lock_guard lock(slots.busy);
      slots.newest.reset();
      return reply(MessageType::FetchReply, "no replica");
    }
    slots.newest_verified = true;
    auto out = reply(MessageType::FetchReply);
    out.slot = slot;
    out.step = slots.step;
    out.bytes = slots.bytes;
    out.manifest_bytes = slots.manifest_text.size();
    out.text = slots.mac;
    return out;
  }

  // The steps held, newest first (each still checked when fetched).
  Message steps(const RankSlots& slots) {
    auto out = reply(MessageType::StepsReply);
    if (slots.newest) out.text = std::to_string(slots.step);
    if (slots.older) out.text += (out.text.empty() ? "" : " ") + std::to_string(slots.older->step);
    return out;
  }

  Message handle(const Message& m, Session& session) {
    if (m.type == MessageType::Hello) return hello(m, session);
    // A refusal answers in the type the peer waits for.
    auto type = m.type == MessageType::Fetch || m.type == MessageType::FetchStep ? MessageType::FetchReply
                : m.type == MessageType::Steps                                   ? MessageType::StepsReply
                : m.type == MessageType::Progress                                ? MessageType::ProgressReply
                                                                                 : MessageType::CommitReply;
    auto owner = owners.find(session.rank);
    if (!session.slots || owner == owners.end() || owner->second != &session)
      return reply(type, "this connection does not own the rank's replicas (no Hello)");
    if (m.rank != session.rank) return reply(type, "not this connection's rank");
    if (m.type == MessageType::Commit) return commit(m, session.slots, session.rank);
    if (m.type == MessageType::Fetch) return fetch(*session.slots, session.rank, std::nullopt);
    if (m.type == MessageType::FetchStep) return fetch(*session.slots, session.rank, m.step);
    if (m.type == MessageType::Steps) return steps(*session.slots);
    if (m.type == MessageType::Progress) return reply(MessageType::ProgressReply);  // a push is under way
    return reply(MessageType::CommitReply, "unexpected message");
  }

  // Serves one message if one arrived; false when the connection is to be dropped.
  bool serve_one(Session& session, bool& active) {
    auto message = session.channel.try_receive();
    if (!message) return true;
    active = true;
    if (!*message) return false;  // the peer left or sent garbage: its connection ends, the replicas stay
    if (auto ok = session.channel.expect(); !ok) return false;
    auto answer = handle(**message, session);
    if (!session.channel.send_nowait(answer)) return false;
    session.pushing_since.reset();
    if ((*message)->type == MessageType::Progress && answer.status == 0)
      session.pushing_since = std::chrono::steady_clock::now();
    return true;
  }

  void drop(std::list<Session>::iterator it) {
    auto owner = owners.find(it->rank);
    if (owner != owners.end() && owner->second == &*it) owners.erase(owner);
    it->connection->close();
    sessions.erase(it);
    --live;
  }

  void progress_loop() {
    auto idle = std::chrono::milliseconds(1);
    while (!stop) {
      {
        std::unique_lock lock(queue_mutex);
        for (auto& s : proven) sessions.push_back(std::move(s));
        proven.clear();
      }
      bool active = false, pushing = false;
      for (auto it = sessions.begin(); it != sessions.end();) {
        auto next = std::next(it);
        if (!serve_one(*it, active))
          drop(it);
        else
          pushing = pushing || it->pushing();
        it = next;
      }
      // Replicas are verified only while no rank pushes: on a host of few cores the checksums would take
      // the CPU the push's transport needs (measured: 0.67x write_bw with, 0.88x without).
      bool verifying = !active && !pushing && verify_some(kVerifySlice);
      if (active || verifying) {
        idle = std::chrono::milliseconds(1);
        continue;
      }
      std::unique_lock lock(queue_mutex);
      // While a push is under way its next Progress or Commit is due within milliseconds: no backing off
      // (the Commit's reply is the push's last step, and a 20 ms nap cost it ~15 % at 256 MiB).
      queue_changed.wait_for(lock, pushing ? kPushPoll : idle, [&] { return stop || !proven.empty(); });
      if (!pushing)
        idle = std::min(idle * 2, std::chrono::duration_cast<std::chrono::milliseconds>(kIdleSleepMax));
    }
    while (!sessions.empty()) drop(sessions.begin());
  }

  // Proves one connection; on success hands it to the progress thread with its receive posted.
  // The proof's time counts from the accept, queueing included: connections that waited behind silent
  // ones past their deadline are closed unheard, so silent strangers cannot stack up their timeouts.
  void prove(std::shared_ptr<Connection> connection, std::chrono::steady_clock::time_point deadline) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto channel = left.count() > 0
                       ? Channel::create(*context, connection, 0, std::chrono::seconds(1))
                       : Result<Channel>(fail(Errc::Timeout, "waited past the proof's deadline"));
    if (!channel) {
      connection->close();
      return void(--live);
    }
    auto config = proof;
    config.timeout = left;
    auto identity = bootstrap::prove_accept(*context, *connection, config, "rdmakit-ckpt serve",
                                            [&](std::string_view) { return channel->expect(); });
    auto rank = identity ? parse_rank_identity(*identity) : std::nullopt;
    if (!rank) {
      log::info("ckpt", "serve: refused a connection: " +
                            (identity ? "its identity names no rank" : identity.error().message()));
      connection->close();
      return void(--live);
    }
    std::lock_guard lock(queue_mutex);
    proven.push_back(Session{std::move(connection), std::move(*channel), *rank, nullptr});
    queue_changed.notify_all();
  }

  void prove_loop() {
    while (true) {
      Unproven next;
      {
        std::unique_lock lock(queue_mutex);
        queue_changed.wait(lock, [&] { return stop || !unproven.empty(); });
        if (stop) return;
        next = std::move(unproven.front());
        unproven.pop_front();
      }
      prove(std::move(next.connection), next.deadline);
    }
  }

  void accept_loop() {
    while (!stop) {
      auto connection = listener->accept(kPoll);
      if (!connection) continue;
      if (live >= options.max_connections) {
        log::warn("ckpt", "serve: closed a connection: max_connections (" +
                              std::to_string(options.max_connections) + ") are open");
        (*connection)->close();
        continue;
      }
      ++live;
      std::lock_guard lock(queue_mutex);
      unproven.push_back({std::move(*connection), std::chrono::steady_clock::now() +
                                                      std::chrono::milliseconds(options.proof_timeout_ms)});
      queue_changed.notify_all();
    }
  }

  void stop_threads() {
    {
      std::lock_guard lock(queue_mutex);
      stop = true;
      queue_changed.notify_all();
    }
    if (acceptor.joinable()) acceptor.join();
    for (auto& t : provers)
      if (t.joinable()) t.join();
    if (progress.joinable()) progress.join();
    for (auto& c : unproven) c.connection->close();
    unproven.clear();
    proven.clear();
  }
};

Result<std::unique_ptr<ReplicaServer>> ReplicaServer::create(const ServeOptions& options) {
  if (options.max_connections == 0 || options.proof_timeout_ms == 0)
    return fail(Errc::InvalidArgument, "ckpt serve: max_connections and proof_timeout_ms must be at least 1");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  Options context_options;
  if (!options.transport.empty()) context_options.transport = options.transport;
  auto context = Context::open(context_options);
  if (!context) return std::unexpected(context.error());
  impl->context = std::move(*context);
  // The secret is settled before anything listens: a non-loopback address without a job secret is an
  // error naming the option (auth::service_secret), never a listener open to anyone.
  bool local = impl->context->capabilities().same_host_only;
  std::string host = options.listen.empty() || local ? "127.0.0.1" : host_of(options.listen);
  if (!local && options.listen.empty()) host = host_of(impl->context->config().listen_address);
  auto secret = bootstrap::auth::service_secret(host, kServiceName, options.job_secret);
  if (!secret) return std::unexpected(secret.error());
  impl->proof = bootstrap::PeerProofConfig{.secret = std::move(*secret),
                                           .label = std::string(kProofLabel),
                                           .timeout = std::chrono::milliseconds(options.proof_timeout_ms)};
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
  auto* raw = impl.get();
  for (int i = 0; i < kProvers; ++i) impl->provers.emplace_back([raw] { raw->prove_loop(); });
  impl->progress = std::jthread([raw] { raw->progress_loop(); });
  impl->acceptor = std::jthread([raw] { raw->accept_loop(); });
  return std::unique_ptr<ReplicaServer>(new ReplicaServer(std::move(impl)));
}

ReplicaServer::ReplicaServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ReplicaServer::~ReplicaServer() { impl_->stop_threads(); }

std::string ReplicaServer::address() const { return impl_->listener->address(); }

std::optional<ReplicaInfo> ReplicaServer::newest(std::uint32_t rank) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->ranks.find(rank);
  if (it == impl_->ranks.end() || !it->second) return std::nullopt;
  std::lock_guard busy(it->second->busy);
  if (!it->second->newest) return std::nullopt;
  return ReplicaInfo{it->second->step, it->second->bytes};
}

std::uint64_t ReplicaServer::used_bytes() const { return *impl_->used; }

}  // namespace rdmakit::ckpt
