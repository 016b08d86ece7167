// Writing one checkpoint from staging memory and committing it so that a crash at any point leaves
// either the new complete checkpoint or the previous ones, never a torn one that looks committed.
//
// Commit order (docs/ckpt.md): data written into <dir>/.tmp-ckpt-<step>.r<rank>/ and fsynced, the manifest
// written and fsynced, the temporary directory fsynced, renamed to <dir>/ckpt-<step> (atomically), the
// parent directory fsynced; only then are checkpoints beyond the newest `keep` deleted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/io.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt::detail {

// Where the crash-test hook (EngineOptions::crash_point) kills the writer.
enum class CrashPoint : int {
  None = 0,
  MidData = 1,         // half of the data chunks written
  AfterData = 2,       // all data written, not yet fsynced
  AfterDataFsync = 3,  // data durable, no manifest
  AfterManifest = 4,   // manifest durable, temporary directory not fsynced
  BeforeRename = 5,    // temporary directory fsynced
  AfterRename = 6,     // renamed, parent directory not yet fsynced
  AfterCommit = 7,     // parent fsynced, older checkpoints not yet deleted
  MidRetention = 8,    // one old checkpoint renamed for deletion, not yet removed
  // Multi-rank commit (src/ckpt/group.cpp): points 1-3 are each rank's shard, 4-8 rank 0's global commit.
  ShardsReported = 9,  // every rank reported a durable shard; rank 0 has not written the global manifest
  Count = 10,
  // Not a kill: for tests whose ranks are threads of one process. Once every shard was reported durable,
  // this rank waits (up to 5 s) until rank 0 committed, then aborts its communicator, so it cannot learn
  // the outcome (as when another rank dies before the broadcast): the outcome is unknown here.
  AbortAfterReport = 100,
};

// The crash-test hook: the whole process dies here, as with kill -9 from outside.
void crash_if(const EngineOptions& options, CrashPoint point);
void crash_if(int crash_point, CrashPoint point);

// Removes a temporary directory unless the commit got far enough to rename it.
struct RemoveOnFailure {
  std::string path;
  bool armed = true;
  ~RemoveOnFailure();
};

double seconds_since(std::int64_t start_ns);

inline constexpr const char* kManifestName = "MANIFEST";

std::string checkpoint_name(std::uint64_t step);  // "ckpt-00000000000000000042"
std::optional<std::uint64_t> parse_checkpoint_name(const std::string& name);
std::string data_file_name(std::uint32_t rank);  // "rank-00000.data"
// A multi-rank shard's own manifest, beside its data file: "rank-00000.manifest" (src/ckpt/group.cpp).
std::string shard_manifest_name(std::uint32_t rank);

// Staging offsets of each buffer: packed in order; the data file is an image of staging.
std::vector<TensorEntry> plan_layout(const std::vector<Buffer>& buffers);

class ReplicaClient;

struct PersistJob {
  std::string directory;
  std::uint64_t step = 0;
  std::int64_t time_ns = 0;
  const unsigned char* staging = nullptr;  // holds `bytes`, and is readable up to round_up(bytes, 4096)
  std::uint64_t bytes = 0;
  std::vector<TensorEntry> tensors;
  const EngineOptions* options = nullptr;
  bool* warned_buffered = nullptr;     // set once the O_DIRECT fallback warning was logged
  const Manifest* previous = nullptr;  // incremental: the checkpoint unchanged chunks are taken from
  Manifest* written = nullptr;         // set to the committed manifest on success
  // Multi-rank only: whether this rank leads its directory (commits there) and how many directories the
  // job writes into (group.hpp), and the replica this rank pushes to while it writes its shard.
  bool directory_leader = true;
  std::uint32_t directories = 1;
  ReplicaClient* replica = nullptr;
  Result<void>* replicated = nullptr;  // the push's outcome, with `replica`
};

// Incremental, pure: marks each chunk of `current` (checksums filled) whose offset, size and checksum
// equal `previous`'s as living in the checkpoint that holds it; returns the bytes so marked. Nothing is
// marked unless both describe one file of the same name, size and chunking, and previous is older.
std::uint64_t mark_unchanged(Manifest& current, const Manifest& previous);

Result<PersistReport> persist_checkpoint(Ring& ring, const PersistJob& job);

// Writes staging into `<tmp>/<manifest.files[0].name>` and fills the manifest's chunk checksums, fsyncs the
// file; returns whether O_DIRECT was used.
// This rank's manifest for `job`: step, time, rank, world size, its one data file and the tensors.
Manifest rank_manifest(const PersistJob& job);
Result<bool> write_data(Ring& ring, const PersistJob& job, const std::string& tmp, Manifest& manifest);
// The commit's last steps, for a temporary directory whose contents are durable: atomic rename to `final`,
// fsync of `directory`, then keep-last-K. Returns the names deleted.
Result<std::vector<std::string>> commit_directory(RemoveOnFailure& tmp, const std::string& directory,
                                                  const std::string& final, const EngineOptions& options);
// commit_directory without the retention: the rename and the fsync of `directory` (a multi-rank commit over
// several directories deletes old checkpoints only once every directory committed).
Result<void> publish_directory(RemoveOnFailure& tmp, const std::string& directory, const std::string& final,
                               const EngineOptions& options);
// Takes back a checkpoint this directory committed when the job as a whole did not (renamed, then removed).
void withdraw_checkpoint(const std::string& directory, std::uint64_t step);
// ".tmp-member-<nonce>-": the marker each rank leaves in its directory at create, so the ranks learn which
// of them share one (a temporary name: whatever a crash leaves is cleaned with the rest).
std::string member_marker_prefix(std::uint64_t nonce);
// ".tmp-ckpt-<step>.<owner>": owner "r<rank>" for one rank's checkpoint, "group" for a multi-rank one.
std::string temporary_name(std::uint64_t step, const std::string& owner);

// Removes what a crashed writer left behind: temporary directories of `rank` (every one without a rank)
// and half-deleted directories.
void clean_leftovers(const std::string& directory, std::optional<std::uint32_t> rank);

// Deletes committed checkpoints beyond the newest `keep`; returns the names deleted.
Result<std::vector<std::string>> apply_retention(const std::string& directory, std::uint32_t keep,
                                                 int crash_point);

// The committed checkpoint directories (names only), newest first.
Result<std::vector<std::pair<std::uint64_t, std::string>>> committed_checkpoints(
    const std::string& directory);

}  // namespace rdmakit::ckpt::detail
