#include "ckpt/persist.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <set>

#include "ckpt/checksum.hpp"
#include "ckpt/manifest.hpp"
#include "core/clock.hpp"
#include "core/log.hpp"

namespace rdmakit::ckpt::detail {

void crash_if(const EngineOptions& options, CrashPoint point) {
  if (options.crash_point == static_cast<int>(point)) ::kill(::getpid(), SIGKILL);
}
void crash_if(int crash_point, CrashPoint point) {
  if (crash_point == static_cast<int>(point)) ::kill(::getpid(), SIGKILL);
}

RemoveOnFailure::~RemoveOnFailure() {
  if (armed) remove_tree(path);
}

double seconds_since(std::int64_t start_ns) { return static_cast<double>(steady_ns() - start_ns) / 1e9; }

namespace {

constexpr std::string_view kCheckpointPrefix = "ckpt-";
constexpr std::string_view kTemporaryPrefix = ".tmp-";
constexpr std::string_view kDeletingPrefix = ".del-";

std::vector<IoChunk> plan_chunks(Manifest& manifest, std::uint64_t bytes, bool direct) {
  std::vector<IoChunk> io;
  for (std::uint64_t offset = 0; offset < bytes; offset += manifest.chunk_bytes) {
    std::uint64_t length = std::min<std::uint64_t>(manifest.chunk_bytes, bytes - offset);
    // O_DIRECT writes whole blocks: the tail is padded from staging and the file truncated afterwards.
    io.push_back(IoChunk{offset, direct ? round_up(length, kIoAlignment) : length, length});
    manifest.chunks.push_back(ChunkEntry{0, offset, length, 0});
  }
  return io;
}

void warn_buffered(const PersistJob& job) {
  if (job.warned_buffered && *job.warned_buffered) return;
  if (job.warned_buffered) *job.warned_buffered = true;
  log::warn("ckpt",
            "O_DIRECT refused by the file system of " + job.directory +
                "; checkpoints are written through the page cache (PersistReport::direct_io = false)");
}

}  // namespace

Result<bool> write_data(Ring& ring, const PersistJob& job, const std::string& tmp, Manifest& manifest) {
  const auto& file = manifest.files[0];
  std::string path = tmp + "/" + file.name;
  bool direct = false;
  auto fd = open_file(path, O_WRONLY | O_CREAT | O_TRUNC, job.options->direct_io.value_or(true), direct,
                      file_modes(job.options->shared_group.value_or(false)).file);
  if (!fd) return std::unexpected(fd.error());
  if (job.options->direct_io.value_or(true) && !direct) warn_buffered(job);
  auto io = plan_chunks(manifest, job.bytes, direct);
  bool reusing = job.previous && job.options->incremental;
  if (reusing) {
    // Every checksum first, to know which chunks to write (no overlap with the writes: the price of
    // writing less).
    for (auto& chunk : manifest.chunks) chunk.checksum = checksum64(job.staging + chunk.offset, chunk.size);
    mark_unchanged(manifest, *job.previous);
    std::erase_if(io, [&](const IoChunk& c) {
      return manifest.chunks[c.offset / manifest.chunk_bytes].source_step.has_value();
    });
  }
  std::size_t completed = 0;
  Pipeline steps{.buffer = [&](std::size_t i,
                               unsigned) { return const_cast<unsigned char*>(job.staging) + io[i].offset; },
                 .before = [&](std::size_t i) -> Result<void> {
                   if (reusing) return {};
                   auto& chunk = manifest.chunks[i];
                   chunk.checksum = checksum64(job.staging + chunk.offset, chunk.size);
                   return {};
                 },
                 .after = [&](std::size_t) -> Result<void> {
                   if (++completed == io.size() / 2 + 1) crash_if(*job.options, CrashPoint::MidData);
                   return {};
                 }};
  if (auto ok = run_pipeline(ring, true, fd->get(), io, steps, file.name); !ok)
    return std::unexpected(ok.error());
  // To its size: the O_DIRECT tail was padded, and skipped chunks (incremental) are holes.
  if (::ftruncate(fd->get(), static_cast<off_t>(job.bytes)) != 0)
    return fail_errno("ckpt: truncating " + path, errno);
  crash_if(*job.options, CrashPoint::AfterData);
  if (auto ok = fsync_fd(fd->get(), path); !ok) return std::unexpected(ok.error());
  crash_if(*job.options, CrashPoint::AfterDataFsync);
  return direct;
}

std::uint64_t mark_unchanged(Manifest& current, const Manifest& previous) {
  if (previous.files.size() != 1 || current.files.size() != 1 ||
      previous.files[0].name != current.files[0].name || previous.files[0].size != current.files[0].size ||
      previous.chunk_bytes != current.chunk_bytes || previous.chunks.size() != current.chunks.size() ||
      previous.step >= current.step)
    return 0;
  std::uint64_t reused = 0;
  for (std::size_t i = 0; i < current.chunks.size(); ++i) {
    const auto& was = previous.chunks[i];
    auto& now = current.chunks[i];
    if (was.offset != now.offset || was.size != now.size || was.checksum != now.checksum) continue;
    now.source_step = was.source_step.value_or(previous.step);  // the holder itself: never a chain
    reused += now.size;
  }
  return reused;
}

namespace {

// Makes `tmp` visible as `final` in one step. A checkpoint of the same step already there (an earlier life
// of the job) is swapped out atomically and then removed, so some checkpoint of that step always exists.
Result<void> publish(const std::string& tmp, const std::string& final) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final.c_str(), RENAME_NOREPLACE) == 0) return {};
  if (errno != EEXIST) return fail_errno("ckpt: renaming " + tmp + " to " + final, errno);
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final.c_str(), RENAME_EXCHANGE) != 0)
    return fail_errno("ckpt: exchanging " + tmp + " with " + final, errno);
  remove_tree(tmp);
  return {};
}

}  // namespace

std::string checkpoint_name(std::uint64_t step) {
  char name[48];
  std::snprintf(name, sizeof(name), "ckpt-%020llu", static_cast<unsigned long long>(step));
  return name;
}

std::optional<std::uint64_t> parse_checkpoint_name(const std::string& name) {
  if (name.size() != kCheckpointPrefix.size() + 20 || !name.starts_with(kCheckpointPrefix))
    return std::nullopt;
  std::uint64_t step = 0;
  const char* begin = name.data() + kCheckpointPrefix.size();
  auto [end, ec] = std::from_chars(begin, name.data() + name.size(), step);
  if (ec != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return step;
}

std::string data_file_name(std::uint32_t rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05u.data", rank);
  return name;
}

std::string shard_manifest_name(std::uint32_t rank) {
  auto name = data_file_name(rank);  // rank-00001.data -> rank-00001.manifest
  return name.substr(0, name.size() - 5) + ".manifest";
}

Manifest rank_manifest(const PersistJob& job) {
  const auto& options = *job.options;
  return Manifest{.step = job.step,
                  .time_ns = job.time_ns,
                  .rank = options.rank,
                  .world_size = options.world_size,
                  .chunk_bytes = options.chunk_bytes.value(),
                  .files = {FileEntry{data_file_name(options.rank), job.bytes}},
                  .tensors = job.tensors};
}

std::vector<TensorEntry> plan_layout(const std::vector<Buffer>& buffers) {
  std::vector<TensorEntry> tensors;
  std::uint64_t offset = 0;
  for (const auto& b : buffers) {
    tensors.push_back(TensorEntry{b.name, b.dtype, b.shape, 0, offset, b.size});
    offset += b.size;
  }
  return tensors;
}

Result<PersistReport> persist_checkpoint(Ring& ring, const PersistJob& job) {
  const auto& options = *job.options;
  auto start = steady_ns();
  RemoveOnFailure tmp{job.directory + "/" + temporary_name(job.step, "r" + std::to_string(options.rank))};
  remove_tree(tmp.path);
  auto modes = file_modes(options.shared_group.value_or(false));
  if (::mkdir(tmp.path.c_str(), modes.directory) != 0) return fail_errno("ckpt: creating " + tmp.path, errno);

  Manifest manifest = rank_manifest(job);
  auto direct = write_data(ring, job, tmp.path, manifest);
  if (!direct) return std::unexpected(direct.error());
  PersistReport report{
      .step = job.step, .bytes = job.bytes, .direct_io = *direct, .write_seconds = seconds_since(start)};
  for (const auto& c : manifest.chunks)
    if (c.source_step) report.reused_bytes += c.size;

  if (auto ok = write_whole_file(tmp.path + "/" + kManifestName, encode_manifest(manifest), modes.file); !ok)
    return std::unexpected(ok.error());
  crash_if(options, CrashPoint::AfterManifest);
  if (auto ok = fsync_directory(tmp.path); !ok) return std::unexpected(ok.error());
  crash_if(options, CrashPoint::BeforeRename);

  report.path = job.directory + "/" + checkpoint_name(job.step);
  auto deleted = commit_directory(tmp, job.directory, report.path, options);
  if (!deleted) return std::unexpected(deleted.error());
  report.deleted = std::move(*deleted);
  report.total_seconds = seconds_since(start);
  if (job.written) *job.written = std::move(manifest);
  return report;
}

Result<void> publish_directory(RemoveOnFailure& tmp, const std::string& directory, const std::string& final,
                               const EngineOptions& options) {
  if (auto ok = publish(tmp.path, final); !ok) return ok;
  tmp.armed = false;
  crash_if(options, CrashPoint::AfterRename);
  if (auto ok = fsync_directory(directory); !ok) return ok;
  crash_if(options, CrashPoint::AfterCommit);
  return {};
}

Result<std::vector<std::string>> commit_directory(RemoveOnFailure& tmp, const std::string& directory,
                                                  const std::string& final, const EngineOptions& options) {
  if (auto ok = publish_directory(tmp, directory, final, options); !ok) return std::unexpected(ok.error());
  return apply_retention(directory, options.keep.value(), options.crash_point);
}

void withdraw_checkpoint(const std::string& directory, std::uint64_t step) {
  auto name = checkpoint_name(step);
  std::string doomed = directory + "/" + std::string(kDeletingPrefix) + name;
  if (::rename((directory + "/" + name).c_str(), doomed.c_str()) == 0) remove_tree(doomed);
}

std::string member_marker_prefix(std::uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(nonce));
  return std::string(kTemporaryPrefix) + "member-" + hex + "-";
}

std::string temporary_name(std::uint64_t step, const std::string& owner) {
  return std::string(kTemporaryPrefix) + checkpoint_name(step) + "." + owner;
}

Result<std::vector<std::pair<std::uint64_t, std::string>>> committed_checkpoints(
    const std::string& directory) {
  std::vector<std::pair<std::uint64_t, std::string>> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    if (auto step = parse_checkpoint_name(name); step && it->is_directory(ec))
      found.emplace_back(*step, name);
  }
  if (ec) return fail_errno("ckpt: listing " + directory, ec.value());
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return found;
}

Result<std::vector<std::string>> apply_retention(const std::string& directory, std::uint32_t keep,
                                                 int crash_point) {
  auto found = committed_checkpoints(directory);
  if (!found) return std::unexpected(found.error());
  // Incremental: a checkpoint some surviving one references survives too. References point to older
  // steps, so one pass newest first sees every referrer before the checkpoints it references.
  std::set<std::uint64_t> referenced;
  auto note_references = [&](const std::string& name) {
    auto text = read_whole_file(directory + "/" + name + "/" + kManifestName, kMaxManifestBytes);
    auto manifest = text ? decode_manifest(*text) : Result<Manifest>(std::unexpected(text.error()));
    if (!manifest) return;  // a damaged checkpoint restores nothing and so needs nothing
    for (const auto& c : manifest->chunks)
      if (c.source_step) referenced.insert(*c.source_step);
  };
  for (std::size_t i = 0; i < std::min<std::size_t>(keep, found->size()); ++i)
    note_references((*found)[i].second);
  std::vector<std::string> deleted;
  for (std::size_t i = keep; i < found->size(); ++i) {
    if (referenced.contains((*found)[i].first)) {
      note_references((*found)[i].second);
      continue;
    }
    // Renamed first, so a crash mid-delete never leaves a half-removed directory under a committed name.
    std::string doomed = directory + "/" + std::string(kDeletingPrefix) + (*found)[i].second;
    if (::rename((directory + "/" + (*found)[i].second).c_str(), doomed.c_str()) != 0)
      return fail_errno("ckpt: renaming " + (*found)[i].second + " for deletion", errno);
    crash_if(crash_point, CrashPoint::MidRetention);
    remove_tree(doomed);
    deleted.push_back((*found)[i].second);
  }
  return deleted;
}

void clean_leftovers(const std::string& directory, std::optional<std::uint32_t> rank) {
  std::string rank_suffix = rank ? ".r" + std::to_string(*rank) : "";
  std::error_code ec;
  std::vector<std::string> doomed;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    if ((name.starts_with(kTemporaryPrefix) && name.ends_with(rank_suffix)) ||
        name.starts_with(kDeletingPrefix))
      doomed.push_back(it->path().string());
  }
  for (const auto& path : doomed) remove_tree(path);
}

}  // namespace rdmakit::ckpt::detail
