#include "ckpt/group.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "ckpt/manifest.hpp"
#include "ckpt/replica.hpp"
#include "core/clock.hpp"
#include "core/log.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::ckpt::detail {
namespace {

// This rank's shard, durable in `pending` when this returns success; `shard` gets its checksums.
Result<bool> write_shard(Ring& ring, const PersistJob& job, const std::string& pending, Manifest& shard) {
  const auto& options = *job.options;
  auto modes = file_modes(options.shared_group.value_or(false));
  if (::mkdir(pending.c_str(), modes.directory) != 0 && errno != EEXIST)
    return fail_errno("ckpt: creating " + pending, errno);
  shard = rank_manifest(job);
  auto direct = write_data(ring, job, pending, shard);
  if (!direct) return direct;
  if (auto ok = write_whole_file(pending + "/" + shard_manifest_name(options.rank), encode_manifest(shard),
                                 modes.file);
      !ok)
    return std::unexpected(ok.error());
  if (auto ok = fsync_directory(pending); !ok) return std::unexpected(ok.error());
  return direct;
}

// The shard on disk and, with a replica, the same bytes pushed into the peer's memory at the same time
// (the data while the disk write computes the checksums; the manifest once it has them).
Result<bool> write_and_replicate(Ring& ring, const PersistJob& job, const std::string& pending,
                                 Manifest& shard, PersistReport& report) {
  if (!job.replica) return write_shard(ring, job, pending, shard);
  // replica_seconds: the push's own time (its data travels while the disk write runs, so the time until
  // both are done would be the disk's, not the push's).
  Result<void> pushed;
  double data_seconds = 0;
  std::thread pusher([&] {
    auto start = steady_ns();
    pushed = job.replica->push_data(job.options->chunk_bytes.value());
    data_seconds = seconds_since(start);
  });
  auto local = write_shard(ring, job, pending, shard);
  pusher.join();
  auto start = steady_ns();
  if (pushed && local)
    pushed = job.replica->push_manifest(shard);
  else if (pushed)
    pushed = fail(Errc::Unavailable, "ckpt: the shard was not written, so not replicated");
  report.replica_seconds = data_seconds + seconds_since(start);
  report.replicated = pushed.has_value();
  if (job.replicated) *job.replicated = pushed;
  return local;
}

// Every rank's shard manifest, from every rank: the global manifest each directory's leader commits.
Result<Manifest> gather_global(coll::Communicator& comm, const Manifest& shard, std::uint32_t world_size) {
  auto text = encode_manifest(shard);
  std::int64_t size = static_cast<std::int64_t>(text.size());
  std::vector<std::int64_t> sizes(world_size);
  if (auto ok = comm.allgather(&size, sizes.data(), 1, coll::DataType::I64); !ok)
    return fail(ok.error().code(), "ckpt: ranks could not exchange their manifests: " + ok.error().message());
  auto widest = *std::max_element(sizes.begin(), sizes.end());
  if (widest <= 0 || static_cast<std::uint64_t>(widest) > kMaxManifestBytes)
    return fail(Errc::ProtocolError, "ckpt: a rank's manifest has an impossible size");
  text.resize(static_cast<std::size_t>(widest));
  std::string all(static_cast<std::size_t>(widest) * world_size, '\0');
  if (auto ok = comm.allgather(text.data(), all.data(), static_cast<std::size_t>(widest), coll::DataType::U8);
      !ok)
    return fail(ok.error().code(), "ckpt: ranks could not exchange their manifests: " + ok.error().message());
  std::vector<Manifest> shards;
  for (std::uint32_t r = 0; r < world_size; ++r) {
    auto decoded = decode_manifest(std::string_view(all).substr(static_cast<std::size_t>(widest) * r,
                                                                static_cast<std::size_t>(sizes[r])));
    if (!decoded)
      return fail(Errc::ProtocolError,
                  "ckpt: the manifest of rank " + std::to_string(r) + ": " + decoded.error().message());
    shards.push_back(std::move(*decoded));
  }
  return merge_shards(shards);
}

// A directory's leader, once every rank reported a durable shard: the global manifest, then the atomic
// rename. Old checkpoints are deleted only once every directory committed (persist_group).
Result<void> commit_here(RemoveOnFailure& pending, const PersistJob& job, const Manifest& global,
                         const std::string& final) {
  const auto& options = *job.options;
  crash_if(options, CrashPoint::ShardsReported);
  if (auto ok = write_whole_file(pending.path + "/" + kManifestName, encode_manifest(global),
                                 file_modes(options.shared_group.value_or(false)).file);
      !ok)
    return ok;
  crash_if(options, CrashPoint::AfterManifest);
  if (auto ok = fsync_directory(pending.path); !ok) return ok;
  crash_if(options, CrashPoint::BeforeRename);
  return publish_directory(pending, job.directory, final, options);
}

std::string failed_ranks(const std::vector<std::int32_t>& durable) {
  std::string list;
  for (std::size_t r = 0; r < durable.size(); ++r)
    if (!durable[r]) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return list;
}

}  // namespace

Result<Manifest> merge_shards(const std::vector<Manifest>& shards) {
  if (shards.empty()) return fail(Errc::InvalidArgument, "ckpt: no shards to merge");
  const auto& first = shards[0];
  Manifest global{.step = first.step,
                  .time_ns = first.time_ns,
                  .rank = 0,
                  .world_size = static_cast<std::uint32_t>(shards.size()),
                  .chunk_bytes = first.chunk_bytes};
  for (std::uint32_t r = 0; r < shards.size(); ++r) {
    const auto& s = shards[r];
    std::string where = "ckpt: shard of rank " + std::to_string(r) + ": ";
    if (s.rank != r || s.world_size != shards.size() || s.step != first.step ||
        s.chunk_bytes != first.chunk_bytes || s.files.size() != 1)
      return fail(Errc::ProtocolError, where + "does not belong to this checkpoint (rank " +
                                           std::to_string(s.rank) + ", step " + std::to_string(s.step) +
                                           ", world size " + std::to_string(s.world_size) + ")");
    global.files.push_back(s.files[0]);
    for (auto t : s.tensors) global.tensors.push_back((t.file = r, t));
    for (auto c : s.chunks) global.chunks.push_back((c.file = r, c));
  }
  if (auto ok = check_manifest(global); !ok) return std::unexpected(ok.error());
  return global;
}

Result<Manifest> shard_view(const Manifest& global, std::uint32_t rank) {
  if (global.files.size() != global.world_size || rank >= global.world_size)
    return fail(Errc::ProtocolError,
                "ckpt: not a multi-rank checkpoint with a file for rank " + std::to_string(rank));
  Manifest view{.step = global.step,
                .time_ns = global.time_ns,
                .rank = rank,
                .world_size = global.world_size,
                .chunk_bytes = global.chunk_bytes,
                .files = {global.files[rank]}};
  for (auto t : global.tensors)
    if (t.file == rank) view.tensors.push_back((t.file = 0, t));
  for (auto c : global.chunks)
    if (c.file == rank) view.chunks.push_back((c.file = 0, c));
  return view;
}

std::optional<bool> committed_on_disk(const std::string& directory, std::uint64_t step) {
  auto manifest = read_manifest(directory + "/" + checkpoint_name(step));
  if (manifest && manifest->step == step) return true;
  struct stat st {};
  if (::stat((directory + "/" + temporary_name(step, "group")).c_str(), &st) == 0) return std::nullopt;
  return false;
}

Result<PersistReport> persist_group(Ring& ring, const PersistJob& job, bool& outcome_unknown) {
  outcome_unknown = false;
  const auto& options = *job.options;
  auto& comm = *options.communicator;
  auto start = steady_ns();
  RemoveOnFailure pending{job.directory + "/" + temporary_name(job.step, "group"), job.directory_leader};
  PersistReport report{
      .step = job.step, .path = job.directory + "/" + checkpoint_name(job.step), .bytes = job.bytes};
  Manifest shard;
  auto local = write_and_replicate(ring, job, pending.path, shard, report);

  std::int32_t durable_here = local ? 1 : 0;
  std::vector<std::int32_t> durable(options.world_size, 0);
  if (auto ok = comm.allgather(&durable_here, durable.data(), 1, coll::DataType::I32); !ok)
    return fail(ok.error().code(), "ckpt: ranks could not report their shards: " + ok.error().message());
  report.direct_io = local && *local;
  report.write_seconds = seconds_since(start);
  bool every_shard = failed_ranks(durable).empty();

  // Every shard durable: each directory's leader commits the global manifest there; the checkpoint is
  // committed once every directory did, and every rank learns that before anyone starts the next shard.
  Result<void> decided =
      fail(Errc::Unavailable, "ckpt: shards of rank(s) " + failed_ranks(durable) + " failed");
  if (every_shard) {
    auto global = gather_global(comm, shard, options.world_size);
    if (!global)
      decided = std::unexpected(global.error());
    else
      decided = job.directory_leader ? commit_here(pending, job, *global, report.path) : Result<void>{};
  }
  if (!decided && job.directory_leader) remove_tree(pending.path);  // before any rank may write the next
  if (options.crash_point == static_cast<int>(CrashPoint::AbortAfterReport) && decided) {
    for (int i = 0; i < 500 && !committed_on_disk(job.directory, job.step).value_or(false); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    comm.abort("ckpt test: rank " + std::to_string(options.rank) + " cannot learn the outcome");
  }
  std::int32_t committed = decided ? 1 : 0;
  if (auto ok = comm.allreduce(&committed, &committed, 1, coll::DataType::I32, coll::ReduceOp::Min); !ok) {
    if (!local) return std::unexpected(local.error());
    if (!decided) return std::unexpected(decided.error());
    // This rank's part is done, and with one directory its leader decided alone. Otherwise some other
    // directory may or may not have committed: an unknown outcome, not a failure.
    if (job.directories == 1 && job.directory_leader) {
      log::warn("ckpt", "checkpoint of step " + std::to_string(job.step) +
                            " committed; the other ranks could not be told: " + ok.error().message());
      if (auto deleted = apply_retention(job.directory, options.keep.value(), options.crash_point))
        report.deleted = std::move(*deleted);
      report.total_seconds = seconds_since(start);
      if (job.written) *job.written = std::move(shard);
      return report;
    }
    outcome_unknown = true;
    return fail(ok.error().code(), "ckpt: the outcome of checkpoint step " + std::to_string(job.step) +
                                       " is unknown: every shard was durable, but whether every directory "
                                       "committed it could not be learned: " +
                                       ok.error().message());
  }
  if (!committed) {
    // A directory that committed takes it back: the job as a whole did not, and its previous checkpoints
    // (which the other directories still have) stay the newest.
    if (decided && job.directory_leader) withdraw_checkpoint(job.directory, job.step);
    if (!local) return std::unexpected(local.error());
    if (!decided) return std::unexpected(decided.error());
    return fail(Errc::Unavailable,
                "ckpt: checkpoint of step " + std::to_string(job.step) +
                    " not committed: another directory's leader could not commit it (see its log)");
  }
  if (job.directory_leader) {
    auto deleted = apply_retention(job.directory, options.keep.value(), options.crash_point);
    if (deleted)
      report.deleted = std::move(*deleted);
    else
      log::warn("ckpt", "step " + std::to_string(job.step) +
                            " committed; deleting old checkpoints failed: " + deleted.error().message());
  }
  report.total_seconds = seconds_since(start);
  if (job.written) *job.written = std::move(shard);
  return report;
}

Result<DirectoryGroup> meet_in_directories(coll::Communicator& comm, const std::string& directory,
                                           bool shared_group) {
  auto modes = file_modes(shared_group);
  std::uint64_t nonce = 0;
  if (comm.rank() == 0) nonce = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  if (auto ok = comm.broadcast(&nonce, &nonce, 1, coll::DataType::I64, 0); !ok)
    return fail(ok.error().code(), "ckpt: ranks could not meet in Engine::create: " + ok.error().message());
  auto prefix = member_marker_prefix(nonce);
  auto made = make_directory(directory, modes.directory);
  if (made) made = write_whole_file(directory + "/" + prefix + std::to_string(comm.rank()), "", modes.file);
  // Every rank's marker is down (or some rank failed) before anyone looks.
  std::int32_t ready = made ? 1 : 0;
  if (auto ok = comm.allreduce(&ready, &ready, 1, coll::DataType::I32, coll::ReduceOp::Min); !ok)
    return fail(ok.error().code(), "ckpt: ranks could not meet in Engine::create: " + ok.error().message());
  std::optional<std::uint32_t> lowest;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; made && !ec && it != end;
       it.increment(ec)) {
    auto name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    std::uint32_t rank = 0;
    auto digits = std::string_view(name).substr(prefix.size());
    auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (error == std::errc{} && ptr == digits.data() + digits.size())
      lowest = std::min(rank, lowest.value_or(rank));
  }
  DirectoryGroup group{.leader = lowest == static_cast<std::uint32_t>(comm.rank())};
  // Every rank has looked before a leader cleans (the markers go with what a crashed job left).
  std::int32_t leading = group.leader ? 1 : 0;
  if (auto ok = comm.allreduce(&leading, &leading, 1, coll::DataType::I32, coll::ReduceOp::Sum); !ok)
    return fail(ok.error().code(), "ckpt: ranks could not meet in Engine::create: " + ok.error().message());
  group.directories = static_cast<std::uint32_t>(leading);
  if (group.leader) clean_leftovers(directory, std::nullopt);
  // No rank writes before every leader has cleaned.
  if (auto ok = comm.allreduce(&ready, &ready, 1, coll::DataType::I32, coll::ReduceOp::Min); !ok)
    return fail(ok.error().code(), "ckpt: ranks could not meet in Engine::create: " + ok.error().message());
  if (!made) return std::unexpected(made.error());
  if (!ready)
    return fail(Errc::Unavailable, "ckpt: another rank could not prepare its directory (see its error)");
  if (ec || !lowest) return fail(Errc::Unavailable, "ckpt: listing " + directory + " found no rank's marker");
  return group;
}

}  // namespace rdmakit::ckpt::detail
