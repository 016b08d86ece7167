#include "rdmakit/ckpt/engine.hpp"

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "ckpt/copy_pool.hpp"
#include "ckpt/group.hpp"
#include "ckpt/io.hpp"
#include "ckpt/manifest.hpp"
#include "ckpt/memory_kind.hpp"
#include "ckpt/options.hpp"
#include "ckpt/persist.hpp"
#include "ckpt/replica.hpp"
#include "ckpt/restore.hpp"
#include "core/clock.hpp"
#include "core/log.hpp"
#include "cuda/pointer.hpp"
#include "rdmakit/ckpt/store.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::ckpt {
namespace {

Result<void> check_options(const EngineOptions& o) {
  if (o.directory.empty()) return fail(Errc::InvalidArgument, "ckpt: EngineOptions::directory is empty");
  if (o.incremental && o.communicator)
    return fail(Errc::NotSupported, "ckpt: incremental checkpoints are single-rank only in this build");
  if (o.world_size == 0 || o.rank >= o.world_size)
    return fail(Errc::InvalidArgument, "ckpt: EngineOptions::rank must be below world_size");
  return {};
}

// EngineOptions::replica may list one server per host ("a:1,b:2", in the order of the hosts' lowest ranks):
// the rank takes the next host's, so its shard is held on another node (a ring over the nodes, never its
// own). A single address is the rank's own choice and is kept as it is.
Result<void> place_replica(EngineOptions& o) {
  if (o.replica.find(',') == std::string::npos) return {};
  std::vector<std::string> servers;
  for (std::size_t begin = 0;;) {
    auto end = o.replica.find(',', begin);
    servers.push_back(o.replica.substr(begin, end == std::string::npos ? end : end - begin));
    if (servers.back().empty())
      return fail(Errc::InvalidArgument,
                  "ckpt: EngineOptions::replica \"" + o.replica + "\" has an empty entry");
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (!o.communicator)
    return fail(
        Errc::InvalidArgument,
        "ckpt: EngineOptions::replica lists servers, one per node, which needs a communicator; without "
        "one give a single address");
  int hosts = o.communicator->host_count();
  if (hosts < 2)
    return fail(Errc::InvalidArgument,
                "ckpt: EngineOptions::replica lists servers to hold each rank's replica "
                "on another node, but every rank runs on one host");
  if (servers.size() != static_cast<std::size_t>(hosts))
    return fail(Errc::InvalidArgument,
                "ckpt: EngineOptions::replica lists " + std::to_string(servers.size()) + " servers for " +
                    std::to_string(hosts) + " hosts: give one per host, in the order of their lowest ranks");
  o.replica = servers[static_cast<std::size_t>((o.communicator->host_rank() + 1) % hosts)];
  return {};
}

Result<void> check_buffers(const std::vector<Buffer>& buffers) {
  std::set<std::string> names;
  for (const auto& b : buffers) {
    std::string where = "ckpt: buffer '" + b.name + "': ";
    if (b.name.empty() || !names.insert(b.name).second)
      return fail(Errc::InvalidArgument, where + "empty or repeated name");
    if (b.kind != MemoryKind::Host && b.kind != MemoryKind::Cuda && b.kind != MemoryKind::Auto)
      return fail(Errc::InvalidArgument, where + "unknown MemoryKind");
    if (!b.data && b.size > 0) return fail(Errc::InvalidArgument, where + "null data");
    std::uint64_t elements = 1;
    for (auto d : b.shape) elements *= d;
    if (!b.shape.empty() && elements * dtype_size(b.dtype) != b.size)
      return fail(Errc::InvalidArgument, where + "shape times dtype size is not its size");
  }
  return {};
}

// The manifest describes exactly this engine's state (same rank, world size, names, dtypes and places).
Result<void> check_compatible(const Manifest& m, const EngineOptions& o,
                              const std::vector<TensorEntry>& layout, std::uint64_t bytes) {
  if (m.world_size != o.world_size)
    return fail(Errc::InvalidArgument, "written by a job of " + std::to_string(m.world_size) +
                                           " ranks, this one has " + std::to_string(o.world_size) +
                                           " (resharding is not supported)");
  if (m.rank != o.rank) return fail(Errc::InvalidArgument, "written by rank " + std::to_string(m.rank));
  if (m.files.size() != 1 || m.files[0].size != bytes || m.tensors.size() != layout.size())
    return fail(Errc::InvalidArgument, "its state has a different size or number of buffers");
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const auto &a = m.tensors[i], &b = layout[i];
    if (a.name != b.name || a.offset != b.offset || a.size != b.size || a.dtype != b.dtype ||
        a.shape != b.shape)
      return fail(Errc::InvalidArgument,
                  "buffer '" + b.name + "' differs from the checkpoint's '" + a.name + "'");
  }
  return {};
}

// Rank and world size come from the communicator; with one, the ranks learn which of them share a
// directory (one for all, or one per node) and each directory's leader alone cleans what a crashed job left
// there (the shared temporary directories included), and no rank starts before it is done.
Result<detail::DirectoryGroup> prepare_directory(EngineOptions& o) {
  if (!o.communicator) {
    if (auto ok =
            detail::make_directory(o.directory, detail::file_modes(o.shared_group.value_or(false)).directory);
        !ok)
      return std::unexpected(ok.error());
    detail::clean_leftovers(o.directory, o.rank);
    return detail::DirectoryGroup{};
  }
  o.rank = static_cast<std::uint32_t>(o.communicator->rank());
  o.world_size = static_cast<std::uint32_t>(o.communicator->size());
  return detail::meet_in_directories(*o.communicator, o.directory, o.shared_group.value_or(false));
}

std::int64_t wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// Hidden although nested in an exported class (which would make it default): the implementation is no part of
// the ABI (docs/abi.md), nor are its members or the lambdas they hold.
struct __attribute__((visibility("hidden"))) Engine::Impl {
  EngineOptions options;
  std::vector<Buffer> buffers;
  std::vector<TensorEntry> layout;
  std::uint64_t bytes = 0;
  detail::AlignedBuffer staging;  // round_up(bytes, 4096): O_DIRECT writes whole blocks
  std::optional<detail::Ring> ring;
  std::optional<detail::CopyPool> pool;
  // Per memory kind, CUDA first (its copies are asynchronous). After `staging` and `pool`, so destroyed
  // before them: the CUDA mover unpins staging, the host mover uses the pool.
  std::vector<std::unique_ptr<detail::Mover>> movers;
  // Host-only states restore in place: each chunk is copied into the application's buffers as soon as its
  // checksum matched, overlapped with the reads of the next chunks (the copy after the whole read cost
  // ~40 % of restore time). CUDA states load from staging after the whole checkpoint verified.
  detail::KindSpans host_spans;
  bool in_place = false;
  bool touched =
      false;  // this restore wrote into the application's buffers (from a checkpoint that failed later)
  bool warned_buffered = false;

  // Shared with the persist thread, under `mutex`.
  std::mutex mutex;
  std::condition_variable changed;
  bool job_pending = false;   // staging holds a snapshot not yet committed or failed
  bool copy_pending = false;  // lazy mode: the job's copy into staging has not finished
  bool stop = false;
  std::uint64_t job_step = 0;
  std::int64_t job_time_ns = 0;
  std::optional<Error> background_error;  // returned once by the next call
  std::optional<PersistReport> last_report;
  // A multi-rank checkpoint whose outcome this rank could not learn (a rank died after every shard was
  // reported, before rank 0's decision arrived): not a failure; the next call settles it from the commit
  // record on disk (resolve_unknown).
  struct UnknownOutcome {
    std::uint64_t step = 0;
    std::string why;
    PersistReport report;
  };
  std::optional<UnknownOutcome> unknown;
  std::optional<detail::ReplicaClient> replica;  // options.replica: the peer's memory
  detail::DirectoryGroup directories;            // with a communicator: who commits in our directory
  std::string restored_from;                     // where the last restore's data came from
  std::optional<Manifest> previous;  // incremental: the newest checkpoint this engine committed or restored
  Manifest written;                  // the persist thread's, moved into `previous` on success
  std::jthread persist_thread;       // last: stopped and joined first

  // Every kind's copy started (the CUDA one runs on its DMA engines meanwhile), then every one finished.
  // Back into the application's buffers, only those `only` selects (a subset restore).
  Result<void> copy(bool to_staging, const detail::Selection& only = {}) {
    Result<void> result;
    std::size_t started = 0;
    for (; started < movers.size() && result; ++started)
      result = movers[started]->start(staging.data(), bytes, to_staging, only);
    if (!result) --started;  // a start that failed has cleaned up after itself
    for (std::size_t i = 0; i < started; ++i)
      if (auto ok = movers[i]->finish(); !ok && result) result = ok;
    return result;
  }

  // Lazy mode: the copy the application's snapshot() left for us, run while it computes; the pool's
  // threads and this one split it, as the application's thread does in eager mode. False when it failed:
  // the snapshot is dropped and its error kept for the application's next call.
  bool copy_in_background(std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    auto copied = copy(true);
    lock.lock();
    copy_pending = false;
    if (!copied)
      background_error =
          Error(copied.error().code(), "ckpt: snapshot of step " + std::to_string(job_step) +
                                           " failed in the background: " + copied.error().message());
    changed.notify_all();
    return copied.has_value();
  }

  // The buffers by memory kind, each placed in staging as `layout` says.
  Result<void> make_movers(const std::vector<Buffer>& buffers) {
    detail::KindSpans host, device;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      MemoryKind where = buffers[i].kind;
      if (where == MemoryKind::Auto) {  // Cuda only when a loaded CUDA driver says device memory
        auto found = ::rdmakit::detail::cuda::classify(buffers[i].data, buffers[i].size, where,
                                                       "ckpt: buffer '" + buffers[i].name + "'");
        if (!found) return std::unexpected(found.error());
        where = found->kind;
      }
      auto& kind = where == MemoryKind::Cuda ? device : host;
      kind.spans.push_back({static_cast<unsigned char*>(buffers[i].data), layout[i].offset, buffers[i].size});
      kind.names.push_back(buffers[i].name);
      kind.indices.push_back(i);
    }
    if (!device.spans.empty()) {
      auto cuda =
          detail::make_cuda_mover(std::move(device), options.cuda_runtime, staging.data(), staging.size());
      if (!cuda) return std::unexpected(cuda.error());
      movers.push_back(std::move(*cuda));
    }
    in_place = movers.empty();
    host_spans = host;
    movers.push_back(detail::make_host_mover(std::move(host), *pool));
    return {};
  }

  // An unknown outcome, settled from the disk: committed (its report becomes the last one, no error), not
  // committed (an error saying so), or, when rank 0's temporary directory is still there a second later
  // (rank 0 still deciding, or dead mid-commit), an error saying it is still unknown. Reported once.
  Result<void> resolve_unknown() {
    UnknownOutcome outcome = std::move(*unknown);
    unknown.reset();
    auto committed = detail::committed_on_disk(options.directory, outcome.step);
    for (int i = 0; i < 100 && !committed; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      committed = detail::committed_on_disk(options.directory, outcome.step);
    }
    std::string step = std::to_string(outcome.step);
    if (committed && *committed) {
      if (options.on_persisted) options.on_persisted(outcome.step, outcome.report);
      log::info("ckpt", "checkpoint of step " + step +
                            ": outcome was unknown, its commit record is on disk: " + "committed");
      last_report = std::move(outcome.report);
      return {};
    }
    Result<void> failed;
    if (!committed)
      failed = fail(Errc::Timeout, "ckpt: the outcome of checkpoint step " + step +
                                       " is still unknown: neither committed nor removed by rank 0 (" +
                                       outcome.why + ")");
    else
      failed = fail(Errc::Unavailable, "ckpt: checkpoint of step " + step +
                                           " was not committed (no commit record " + outcome.report.path +
                                           "); its outcome had been unknown: " + outcome.why);
    if (options.on_persisted) options.on_persisted(outcome.step, std::unexpected(failed.error()));
    return failed;
  }

  // Returns the background error, if any, once; settles an unknown outcome first.
  Result<void> take_error() {
    if (unknown)
      if (auto ok = resolve_unknown(); !ok) return ok;
    if (!background_error) return {};
    Error error = std::move(*background_error);
    background_error.reset();
    return std::unexpected(std::move(error));
  }

  // Waits until staging is free; returns the background error, if any, once.
  Result<void> settle(std::unique_lock<std::mutex>& lock) {
    changed.wait(lock, [&] { return !job_pending; });
    return take_error();
  }

  // What one restore writes: the buffers `only` names (every one when it is empty), and of those the host
  // ones an in-place restore copies into. An unknown name is refused before anything is read.
  struct Target {
    detail::Selection only;
    std::vector<detail::Span> in_place;
  };
  Result<Target> target(const std::vector<std::string>& only) const {
    Target t;
    if (!only.empty()) {
      t.only.assign(buffers.size(), false);
      for (const auto& name : only) {
        auto found =
            std::find_if(buffers.begin(), buffers.end(), [&](const Buffer& b) { return b.name == name; });
        if (found == buffers.end())
          return fail(Errc::InvalidArgument,
                      "ckpt: restore of buffer '" + name +
                          "': the engine has no buffer of that name (nothing was loaded)");
        t.only[static_cast<std::size_t>(found - buffers.begin())] = true;
      }
    }
    if (in_place) t.in_place = detail::selected_spans(host_spans, t.only);
    return t;
  }

  // A restore starts: the background work settled, its target known, and with a communicator every rank's
  // arguments accepted before any rank reads (a rank that refused its own must not leave the others
  // loading alone, nor waiting for it in the vote of restore_group).
  Result<Target> begin_restore(const std::vector<std::string>& only) {
    {
      std::unique_lock lock(mutex);
      if (auto ok = settle(lock); !ok) return std::unexpected(ok.error());
    }
    auto mine = target(only);
    if (!options.communicator) return mine;
    std::int32_t accepted = mine ? 1 : 0;
    if (auto ok = options.communicator->allreduce(&accepted, &accepted, 1, coll::DataType::I32,
                                                  coll::ReduceOp::Min);
        !ok)
      return fail(ok.error().code(), "ckpt: ranks could not begin a restore: " + ok.error().message());
    if (mine && !accepted)
      return fail(Errc::InvalidArgument,
                  "ckpt: another rank refused its restore's arguments (its error names them); nothing was "
                  "loaded");
    return mine;
  }

  // Reads one candidate checkpoint into staging: true when every check passed, false when it is damaged or
  // not this engine's (logged, skipped), an error when it must be refused (another world size). The whole
  // shard is read and verified whatever the target; in place, only the target's buffers are written.
  Result<bool> try_checkpoint(const CheckpointInfo& info, const Target& target) {
    auto skip = [&](const std::string& why) {
      log::warn("ckpt", "skipping " + info.path + ": " + why);
      return false;
    };
    if (!info.problem.empty()) return skip(info.problem);
    // Another world size is the caller's mistake, not damage: refused rather than skipped.
    if (info.manifest.world_size != options.world_size)
      return fail(Errc::InvalidArgument, "ckpt: " + info.path + " was written by a job of " +
                                             std::to_string(info.manifest.world_size) +
                                             " ranks, this one has " + std::to_string(options.world_size) +
                                             " (resharding is not supported)");
    Manifest manifest = info.manifest;
    if (options.communicator) {
      auto view = detail::shard_view(info.manifest, options.rank);
      if (!view) return skip(view.error().message());
      manifest = std::move(*view);
    }
    if (auto ok = check_compatible(manifest, options, layout, bytes); !ok) return skip(ok.error().message());
    detail::Verified load_chunk;
    if (in_place)
      load_chunk = [&](std::uint64_t offset, std::uint64_t size) {
        for (const auto& span : target.in_place)  // `touched`: only when a target's bytes were written
          if (span.offset < offset + size && offset < span.offset + span.size) touched = true;
        detail::copy_range(target.in_place, staging.data(), offset, offset + size, false);
      };
    if (auto ok = detail::read_verified(info.path, manifest, staging.data(), {}, load_chunk); !ok)
      return skip(ok.error().message());
    return true;
  }

  // After try_checkpoint() verified one: the target's buffers get it (in place: they already have it).
  Result<void> load(const Target& target) { return in_place ? Result<void>{} : copy(false, target.only); }

  // No checkpoint could be restored: NotFound with the buffers untouched, or, when a damaged one was
  // partly loaded in place, an error that says so (never mistaken for a fresh start).
  Result<std::uint64_t> nothing_restored(const std::string& why) {
    if (!touched) return fail(Errc::NotFound, why);
    return fail(Errc::ProtocolError, why +
                                         "; a damaged checkpoint tried before overwrote part of the "
                                         "buffers: re-initialize them before starting afresh");
  }

  // Every rank restores the same step: the newest that every rank still has, on its disk or in its
  // replica. Each round every rank proposes its newest candidate not above the bound; the smallest
  // proposal is tried by all and taken only when every rank verified its shard of it, else the bound drops
  // below it. So a step committed in some directories only, or pushed to replicas but never committed, or
  // lost with a node and its replicas, gives way to the newest step that is complete.
  Result<std::uint64_t> restore_group(const std::vector<CheckpointInfo>& found, const Target& target,
                                      std::optional<std::uint64_t> exact) {
    std::vector<std::uint64_t> held;  // the steps our replica server holds for this rank
    if (replica) {
      if (auto steps = replica->held_steps())
        held = std::move(*steps);
      else
        log::warn("ckpt", "replica: " + steps.error().message());
    }
    auto fits = [&](std::uint64_t step, std::int64_t bound) {
      return static_cast<std::int64_t>(step) <= bound && (!exact || step == *exact);
    };
    std::int64_t bound = exact ? static_cast<std::int64_t>(*exact) : std::numeric_limits<std::int64_t>::max();
    while (true) {
      std::int64_t mine = -1;
      for (const auto& info : found)
        if (fits(info.step, bound)) mine = std::max(mine, static_cast<std::int64_t>(info.step));
      for (auto step : held)
        if (fits(step, bound)) mine = std::max(mine, static_cast<std::int64_t>(step));
      std::int64_t votes[2] = {mine, -mine};  // min over ranks: the step tried, and (negated) the newest
      if (auto ok =
              options.communicator->allreduce(votes, votes, 2, coll::DataType::I64, coll::ReduceOp::Min);
          !ok)
        return fail(ok.error().code(),
                    "ckpt: ranks could not agree on a checkpoint: " + ok.error().message());
      if (votes[0] < 0) return no_common_step(mine >= 0, bound, exact);
      auto step = static_cast<std::uint64_t>(votes[0]);
      if (-votes[1] > votes[0])
        log::warn("ckpt", "ranks hold checkpoints up to step " + std::to_string(-votes[1]) +
                              "; trying step " + std::to_string(step) +
                              ", the newest that every rank proposes");
      auto from = try_step(found, held, step, target);
      if (!from) return std::unexpected(from.error());
      std::int32_t all = from->where.empty() ? 0 : 1;
      if (auto ok = options.communicator->allreduce(&all, &all, 1, coll::DataType::I32, coll::ReduceOp::Min);
          !ok)
        return fail(ok.error().code(),
                    "ckpt: ranks could not agree on a checkpoint: " + ok.error().message());
      if (all) {
        if (auto ok = from->replica ? copy(false, target.only) : load(target); !ok)
          return std::unexpected(ok.error());
        restored_from = from->where;
        log::info("ckpt", "rank " + std::to_string(options.rank) + ": step " + std::to_string(step) +
                              " restored from " + from->where);
        return step;
      }
      if (!from->where.empty())
        log::warn("ckpt", "skipping step " + std::to_string(step) + ": another rank could not restore it");
      if (exact)
        return nothing_restored("ckpt: checkpoint of step " + std::to_string(step) +
                                " does not verify on every rank (the warnings say why)");
      bound = votes[0] - 1;
    }
  }

  // This rank's shard of `step` into staging (in place: into the target buffers as it verifies), from the
  // disk, else from the replica: where it came from, or empty when neither has it intact.
  struct Source {
    std::string where;  // the checkpoint's path, or "replica at <address>"; empty: none
    bool replica = false;
  };
  Result<Source> try_step(const std::vector<CheckpointInfo>& found, const std::vector<std::uint64_t>& held,
                          std::uint64_t step, const Target& target) {
    for (const auto& info : found) {
      if (info.step != step) continue;
      auto tried = try_checkpoint(info, target);
      if (!tried) return std::unexpected(tried.error());
      if (*tried) return Source{info.path};
    }
    if (std::find(held.begin(), held.end(), step) == held.end()) return Source{};
    auto manifest = replica->fetch(step);
    if (!manifest) {
      log::warn("ckpt",
                "replica of step " + std::to_string(step) + " unusable: " + manifest.error().message());
      return Source{};
    }
    if (auto ok = check_compatible(*manifest, options, layout, bytes); !ok) {
      log::warn("ckpt",
                "replica of step " + std::to_string(step) + " is of another state: " + ok.error().message());
      return Source{};
    }
    return Source{"replica at " + options.replica, true};
  }

  // No step that every rank has: which ranks have none (NotFound, or ProtocolError when a damaged
  // checkpoint was partly loaded in place).
  Result<std::uint64_t> no_common_step(bool have_some, std::int64_t bound,
                                       std::optional<std::uint64_t> exact) {
    std::int32_t has = have_some ? 1 : 0;
    std::vector<std::int32_t> every(options.world_size, 0);
    std::string lacking;
    if (options.communicator->allgather(&has, every.data(), 1, coll::DataType::I32))
      for (std::size_t r = 0; r < every.size(); ++r)
        if (!every[r]) lacking += (lacking.empty() ? "" : ", ") + std::to_string(r);
    std::string what = exact ? "of step " + std::to_string(*exact) : "complete on every rank";
    std::string above = bound == std::numeric_limits<std::int64_t>::max() || exact
                            ? ""
                            : " (newer steps were incomplete or did not verify)";
    return nothing_restored(
        "ckpt: no checkpoint " + what + above + ": rank(s) " +
        (lacking.empty() ? std::string("?") : lacking) +
        " hold no shard of it, on disk in their directory or in a replica (this rank: " + options.directory +
        (replica ? ", replica at " + options.replica : std::string()) + ")");
  }

  // The committed checkpoint also goes to the peer's memory: every chunk, references resolved (the
  // replica stands alone: the peer holds no older ones).
  Result<void> push_replica(PersistReport& report) {
    Manifest whole = written;
    for (auto& c : whole.chunks) c.source_step.reset();
    auto start = steady_ns();
    auto pushed = replica->push(whole);
    report.replica_seconds = detail::seconds_since(start);
    if (!pushed)
      log::error("ckpt", "replica of step " + std::to_string(report.step) + ": " + pushed.error().describe());
    report.replicated = pushed.has_value();
    return pushed;
  }

  // The replica's newest, when it is at least as new as the newest checkpoint on disk: read into staging
  // and verified. Any failure falls back to the disk (logged).
  std::optional<std::uint64_t> restore_from_replica(const std::vector<CheckpointInfo>& found,
                                                    const Target& target) {
    auto step = replica->newest_step();
    if (!step) {
      if (step.error().code() != Errc::NotFound) log::warn("ckpt", "replica: " + step.error().message());
      return std::nullopt;
    }
    if (!found.empty() && found.front().step > *step) return std::nullopt;
    auto manifest = replica->fetch();
    if (!manifest) {
      log::warn("ckpt", "replica unusable, restoring from disk: " + manifest.error().message());
      return std::nullopt;
    }
    if (auto ok = check_compatible(*manifest, options, layout, bytes); !ok) {
      log::warn("ckpt", "replica of another state, restoring from disk: " + ok.error().message());
      return std::nullopt;
    }
    if (auto ok = copy(false, target.only); !ok) {
      log::warn("ckpt", "replica could not be loaded, restoring from disk: " + ok.error().message());
      return std::nullopt;
    }
    previous.reset();  // the next incremental checkpoint is a full one: the disk holds no such base
    restored_from = "replica at " + options.replica;
    return manifest->step;
  }

  void persist_loop() {
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return stop || job_pending; });
      if (!job_pending) return;  // stopping with nothing to do
      if (copy_pending && !copy_in_background(lock)) {
        if (options.on_persisted && background_error) {  // this snapshot's outcome too: never persisted
          auto step = job_step;
          Error error = *background_error;
          lock.unlock();
          options.on_persisted(step, std::unexpected(std::move(error)));
          lock.lock();
        }
        job_pending = false;  // nothing to persist: staging holds a partial copy
        changed.notify_all();
        continue;
      }
      detail::PersistJob job{options.directory,
                             job_step,
                             job_time_ns,
                             staging.data(),
                             bytes,
                             layout,
                             &options,
                             &warned_buffered,
                             options.incremental && previous ? &*previous : nullptr,
                             &written};
      // Many ranks: the replica is pushed while the shard is written, before the commit.
      Result<void> replicated;
      if (options.communicator) {
        job.directory_leader = directories.leader;
        job.directories = directories.directories;
        job.replica = replica ? &*replica : nullptr;
        job.replicated = &replicated;
      }
      lock.unlock();
      bool outcome_unknown = false;
      auto report = options.communicator ? detail::persist_group(*ring, job, outcome_unknown)
                                         : detail::persist_checkpoint(*ring, job);
      if (!report && outcome_unknown)
        log::warn("ckpt", report.error().message() + " (settled from the commit record at the next call)");
      else if (!report)
        log::error("ckpt", "checkpoint of step " + std::to_string(job.step) +
                               " failed: " + report.error().describe());
      if (report && replica && !options.communicator)
        replicated = push_replica(*report);
      else if (!replicated && report)
        log::error("ckpt",
                   "replica of step " + std::to_string(job.step) + ": " + replicated.error().describe());
      // An unknown outcome settled later as committed reports whether this rank's push succeeded.
      bool pushed = replica.has_value() && replicated.has_value();
      if (!report) replicated = {};  // the checkpoint's own failure is the one reported
      // Before staging is handed back: the application hears of step N before snapshot(N+1) can start.
      if (options.on_persisted && !outcome_unknown) options.on_persisted(job.step, report);
      lock.lock();
      if (report) {
        last_report = std::move(*report);
        previous = std::move(written);
      }
      if (!replicated)
        background_error =
            Error(replicated.error().code(),
                  "ckpt: the replica of step " + std::to_string(job.step) +
                      " failed (the checkpoint on disk is committed): " + replicated.error().message());
      else if (!report && outcome_unknown)
        unknown = UnknownOutcome{
            .step = job.step,
            .why = report.error().message(),
            .report = PersistReport{.step = job.step,
                                    .path = options.directory + "/" + detail::checkpoint_name(job.step),
                                    .bytes = job.bytes,
                                    .replicated = pushed}};
      else if (!report)
        background_error = Error(report.error().code(),
                                 "ckpt: checkpoint of step " + std::to_string(job.step) +
                                     " failed in the background: " + report.error().message(),
                                 report.error().sys_errno());
      job_pending = false;
      changed.notify_all();
    }
  }
};

Result<std::unique_ptr<Engine>> Engine::create(EngineOptions given, std::vector<Buffer> buffers) {
  auto resolved = detail::resolve_engine_options(std::move(given));  // the tunables, each checked
  if (!resolved)
    return std::unexpected(Error(resolved.error().code(), "ckpt: " + resolved.error().message()));
  EngineOptions options = std::move(*resolved);
  if (auto ok = check_options(options); !ok) return std::unexpected(ok.error());
  if (auto ok = place_replica(options); !ok) return std::unexpected(ok.error());
  if (auto ok = check_buffers(buffers); !ok) return std::unexpected(ok.error());
  auto directories = prepare_directory(options);
  if (!directories) return std::unexpected(directories.error());

  auto impl = std::make_unique<Impl>();
  impl->directories = *directories;
  impl->layout = detail::plan_layout(buffers);
  for (const auto& b : buffers) impl->bytes += b.size;
  auto staging =
      detail::AlignedBuffer::allocate(detail::round_up(impl->bytes, detail::kIoAlignment), /*populate=*/true);
  if (!staging) return std::unexpected(staging.error());
  impl->staging = std::move(*staging);
  auto ring = detail::Ring::create(*options.io_depth);
  if (!ring) return std::unexpected(ring.error());
  impl->ring.emplace(std::move(*ring));
  unsigned threads = *options.copy_threads;
  if (!options.replica.empty()) {
    detail::ReplicaClient::Settings settings{.timeout =
                                                 std::chrono::milliseconds(*options.replica_timeout_ms)};
    auto replica =
        detail::ReplicaClient::connect(options.replica, options.rank, options.world_size,
                                       impl->staging.data(), impl->staging.size(), impl->bytes, settings);
    if (!replica)
      return fail(replica.error().code(),
                  "ckpt: replica at " + options.replica + ": " + replica.error().message());
    impl->replica.emplace(std::move(*replica));
  }
  impl->pool.emplace(threads);
  impl->options = std::move(options);
  if (auto ok = impl->make_movers(buffers); !ok) return std::unexpected(ok.error());
  impl->buffers = std::move(buffers);
  impl->persist_thread = std::jthread([raw = impl.get()] { raw->persist_loop(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->changed.notify_all();
  if (impl_->persist_thread.joinable()) impl_->persist_thread.join();
}

Result<void> Engine::snapshot(std::uint64_t step) {
  auto& s = *impl_;
  {
    std::unique_lock lock(s.mutex);
    if (auto ok = s.settle(lock); !ok) return ok;
  }
  auto time_ns = wall_clock_ns();  // the state's time: lazy copies it later, unchanged by contract
  if (!s.options.lazy)
    if (auto ok = s.copy(true); !ok)
      return fail(ok.error().code(),
                  "ckpt: snapshot of step " + std::to_string(step) + " failed: " + ok.error().message());
  std::lock_guard lock(s.mutex);
  s.job_step = step;
  s.job_time_ns = time_ns;
  s.copy_pending = s.options.lazy;
  s.job_pending = true;
  s.changed.notify_all();
  return {};
}

Result<void> Engine::wait_snapshot() {
  std::unique_lock lock(impl_->mutex);
  impl_->changed.wait(lock, [&] { return !impl_->copy_pending; });
  return impl_->take_error();
}

Result<PersistReport> Engine::wait_persisted() {
  std::unique_lock lock(impl_->mutex);
  if (auto ok = impl_->settle(lock); !ok) return std::unexpected(ok.error());
  if (!impl_->last_report) return fail(Errc::NotFound, "ckpt: no checkpoint was persisted yet");
  return *impl_->last_report;
}

Result<std::uint64_t> Engine::restore_latest() { return restore_latest({}); }

Result<std::uint64_t> Engine::restore_latest(const std::vector<std::string>& only) {
  auto& s = *impl_;
  auto target = s.begin_restore(only);
  if (!target) return std::unexpected(target.error());
  auto found = list_checkpoints(s.options.directory);
  if (!found) return std::unexpected(found.error());
  s.touched = false;
  if (s.options.communicator) return s.restore_group(*found, *target, std::nullopt);
  if (s.replica)
    if (auto step = s.restore_from_replica(*found, *target)) return *step;
  for (const auto& info : *found) {
    auto verified = s.try_checkpoint(info, *target);
    if (!verified) return std::unexpected(verified.error());
    if (!*verified) continue;
    if (auto ok = s.load(*target); !ok) return std::unexpected(ok.error());
    s.previous = info.manifest;
    s.restored_from = info.path;
    return info.step;
  }
  return s.nothing_restored("ckpt: no complete checkpoint in " + s.options.directory);
}

Result<std::uint64_t> Engine::restore(std::uint64_t step) { return restore(step, {}); }

Result<std::uint64_t> Engine::restore(std::uint64_t step, const std::vector<std::string>& only) {
  auto& s = *impl_;
  auto target = s.begin_restore(only);
  if (!target) return std::unexpected(target.error());
  auto found = list_checkpoints(s.options.directory);
  if (!found) return std::unexpected(found.error());
  std::vector<CheckpointInfo> chosen;
  for (auto& info : *found)
    if (info.step == step) chosen.push_back(std::move(info));
  s.touched = false;
  if (s.options.communicator) return s.restore_group(chosen, *target, step);
  std::string what = "ckpt: checkpoint of step " + std::to_string(step) + " in " + s.options.directory;
  if (chosen.empty()) return fail(Errc::NotFound, what + ": none");
  auto verified = s.try_checkpoint(chosen.front(), *target);
  if (!verified) return std::unexpected(verified.error());
  if (!*verified) return s.nothing_restored(what + " does not verify (the warning says why)");
  if (auto ok = s.load(*target); !ok) return std::unexpected(ok.error());
  s.previous = chosen.front().manifest;
  s.restored_from = chosen.front().path;
  return step;
}

const EngineOptions& Engine::options() const noexcept { return impl_->options; }
std::string Engine::restored_from() const { return impl_->restored_from; }
std::size_t Engine::state_bytes() const noexcept { return impl_->bytes; }
std::size_t Engine::staging_bytes() const noexcept { return impl_->staging.size(); }

}  // namespace rdmakit::ckpt
