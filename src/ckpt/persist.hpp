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
  Count = 9,
};

inline constexpr const char* kManifestName = "MANIFEST";

std::string checkpoint_name(std::uint64_t step);  // "ckpt-00000000000000000042"
std::optional<std::uint64_t> parse_checkpoint_name(const std::string& name);
std::string data_file_name(std::uint32_t rank);  // "rank-00000.data"

// Staging offsets of each buffer: packed in order; the data file is an image of staging.
std::vector<TensorEntry> plan_layout(const std::vector<Buffer>& buffers);

struct PersistJob {
  std::string directory;
  std::uint64_t step = 0;
  std::int64_t time_ns = 0;
  const unsigned char* staging = nullptr;  // holds `bytes`, and is readable up to round_up(bytes, 4096)
  std::uint64_t bytes = 0;
  std::vector<TensorEntry> tensors;
  const EngineOptions* options = nullptr;
  bool* warned_buffered = nullptr;  // set once the O_DIRECT fallback warning was logged
};

Result<PersistReport> persist_checkpoint(Ring& ring, const PersistJob& job);

// Removes what a crashed writer of this rank left behind (temporary and half-deleted directories).
void clean_leftovers(const std::string& directory, std::uint32_t rank);

// Deletes committed checkpoints beyond the newest `keep`; returns the names deleted.
Result<std::vector<std::string>> apply_retention(const std::string& directory, std::uint32_t keep,
                                                 int crash_point);

// The committed checkpoint directories (names only), newest first.
Result<std::vector<std::pair<std::uint64_t, std::string>>> committed_checkpoints(
    const std::string& directory);

}  // namespace rdmakit::ckpt::detail
