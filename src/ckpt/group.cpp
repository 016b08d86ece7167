#include "ckpt/group.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "ckpt/manifest.hpp"
#include "core/clock.hpp"
#include "core/log.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::ckpt::detail {
namespace {

std::string shard_manifest_name(std::uint32_t rank) {
  auto name = data_file_name(rank);  // rank-00001.data -> rank-00001.manifest
  return name.substr(0, name.size() - 5) + ".manifest";
}

// This rank's shard, durable in `pending` when this returns success.
Result<bool> write_shard(Ring& ring, const PersistJob& job, const std::string& pending) {
  const auto& options = *job.options;
  auto modes = file_modes(options.shared_group.value_or(false));
  if (::mkdir(pending.c_str(), modes.directory) != 0 && errno != EEXIST)
    return fail_errno("ckpt: creating " + pending, errno);
  Manifest shard = rank_manifest(job);
  auto direct = write_data(ring, job, pending, shard);
  if (!direct) return direct;
  if (auto ok = write_whole_file(pending + "/" + shard_manifest_name(options.rank), encode_manifest(shard),
                                 modes.file);
      !ok)
    return std::unexpected(ok.error());
  if (auto ok = fsync_directory(pending); !ok) return std::unexpected(ok.error());
  return direct;
}

// Rank 0, once every rank reported a durable shard: the global manifest, then the atomic rename.
Result<std::vector<std::string>> commit_group(RemoveOnFailure& pending, const PersistJob& job,
                                              const std::string& final) {
  const auto& options = *job.options;
  std::vector<Manifest> shards;
  for (std::uint32_t r = 0; r < options.world_size; ++r) {
    auto path = pending.path + "/" + shard_manifest_name(r);
    auto text = read_whole_file(path, kMaxManifestBytes);
    if (!text) return std::unexpected(text.error());
    auto shard = decode_manifest(*text);
    if (!shard) return fail(Errc::ProtocolError, "ckpt: " + path + ": " + shard.error().message());
    shards.push_back(std::move(*shard));
  }
  auto global = merge_shards(shards);
  if (!global) return std::unexpected(global.error());
  crash_if(options, CrashPoint::ShardsReported);
  if (auto ok = write_whole_file(pending.path + "/" + kManifestName, encode_manifest(*global),
                                 file_modes(options.shared_group.value_or(false)).file);
      !ok)
    return std::unexpected(ok.error());
  crash_if(options, CrashPoint::AfterManifest);
  if (auto ok = fsync_directory(pending.path); !ok) return std::unexpected(ok.error());
  crash_if(options, CrashPoint::BeforeRename);
  return commit_directory(pending, job.directory, final, options);
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
  RemoveOnFailure pending{job.directory + "/" + temporary_name(job.step, "group"), options.rank == 0};
  auto local = write_shard(ring, job, pending.path);

  std::int32_t durable_here = local ? 1 : 0;
  std::vector<std::int32_t> durable(options.world_size, 0);
  if (auto ok = comm.allgather(&durable_here, durable.data(), 1, coll::DataType::I32); !ok)
    return fail(ok.error().code(), "ckpt: ranks could not report their shards: " + ok.error().message());
  PersistReport report{.step = job.step,
                       .path = job.directory + "/" + checkpoint_name(job.step),
                       .bytes = job.bytes,
                       .direct_io = local && *local,
                       .write_seconds = seconds_since(start)};
  if (options.crash_point == static_cast<int>(CrashPoint::AbortAfterReport) && local &&
      failed_ranks(durable).empty()) {
    for (int i = 0; i < 500 && !committed_on_disk(job.directory, job.step).value_or(false); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    comm.abort("ckpt test: rank " + std::to_string(options.rank) + " cannot learn the outcome");
  }

  // Rank 0 decides; everyone learns the outcome before anyone starts the next shard.
  std::int32_t committed = 0;
  Result<std::vector<std::string>> outcome =
      fail(Errc::Unavailable, "ckpt: shards of rank(s) " + failed_ranks(durable) + " failed");
  if (options.rank == 0 && failed_ranks(durable).empty()) {
    outcome = commit_group(pending, job, report.path);
    committed = outcome ? 1 : 0;
  }
  if (options.rank == 0 && !committed) remove_tree(pending.path);  // before any rank may write the next
  if (auto ok = comm.broadcast(&committed, &committed, 1, coll::DataType::I32, 0); !ok) {
    // Rank 0 decided and knows what; another rank whose shard was durable cannot tell: every shard was
    // reported durable, so rank 0 may well have committed. That is an unknown outcome, not a failure.
    if (options.rank == 0 || !local || !failed_ranks(durable).empty()) {
      if (options.rank == 0 && committed) {
        log::warn("ckpt", "checkpoint of step " + std::to_string(job.step) +
                              " committed; the other ranks could not be told: " + ok.error().message());
        report.deleted = std::move(*outcome);
        report.total_seconds = seconds_since(start);
        return report;
      }
      if (!local) return std::unexpected(local.error());
      if (options.rank == 0) return std::unexpected(outcome.error());
      return fail(Errc::Unavailable,
                  "ckpt: rank 0 did not commit (shards failed on rank(s) " + failed_ranks(durable) + ")");
    }
    outcome_unknown = true;
    return fail(ok.error().code(), "ckpt: the outcome of checkpoint step " + std::to_string(job.step) +
                                       " is unknown: every shard was durable, but rank 0's decision "
                                       "could not be learned: " +
                                       ok.error().message());
  }
  if (!local) return std::unexpected(local.error());
  if (!committed) {
    if (options.rank == 0) return std::unexpected(outcome.error());
    return fail(Errc::Unavailable, "ckpt: rank 0 did not commit (shards failed on rank(s) " +
                                       (failed_ranks(durable).empty() ? std::string("none; see rank 0's log")
                                                                      : failed_ranks(durable)) +
                                       ")");
  }
  if (options.rank == 0) report.deleted = std::move(*outcome);
  report.total_seconds = seconds_since(start);
  return report;
}

}  // namespace rdmakit::ckpt::detail
