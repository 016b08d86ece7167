// Reading checkpoints without an engine: what `rdmakit-ckpt list|verify|show|export` is built on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rdmakit/ckpt/types.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit::ckpt {

// One buffer's place in a checkpoint.
struct TensorEntry {
  std::string name{};
  DType dtype = DType::U8;
  std::vector<std::uint64_t> shape{};
  std::uint32_t file = 0;    // index into Manifest::files
  std::uint64_t offset = 0;  // byte offset in that file
  std::uint64_t size = 0;
};

// One checksummed chunk of a data file.
struct ChunkEntry {
  std::uint32_t file = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t checksum = 0;
  // Incremental checkpoints: the bytes are not in this checkpoint's file but at the same offset of the file
  // of the same name in checkpoint `source_step` (always older, and the one that holds them: never a
  // chain). Retention keeps that checkpoint while this one exists.
  std::optional<std::uint64_t> source_step{};
};

struct FileEntry {
  std::string name{};  // a plain file name inside the checkpoint directory
  std::uint64_t size = 0;
};

struct Manifest {
  std::uint32_t version = 1;
  std::uint64_t step = 0;
  std::int64_t time_ns = 0;  // wall clock (CLOCK_REALTIME) when the snapshot was taken
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  std::uint64_t chunk_bytes = 0;
  std::vector<FileEntry> files{};
  std::vector<TensorEntry> tensors{};
  std::vector<ChunkEntry> chunks{};
};

struct CheckpointInfo {
  std::string path{};
  std::uint64_t step = 0;
  // Empty when the manifest reads and checks; else why not (the checkpoint is unusable). Chunks are not
  // verified by list_checkpoints(): verify_checkpoint() does that.
  std::string problem{};
  Manifest manifest{};
};

// The committed checkpoints under `directory`, newest first (in-progress and deleted ones are not listed).
RDMAKIT_API Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& directory);
// Reads and checks the manifest of one checkpoint directory.
RDMAKIT_API Result<Manifest> read_manifest(const std::string& checkpoint_path);
// Reads every data file and checks every chunk checksum. The error names the file and the chunk.
// `progress` (may be empty) is called with bytes verified so far and the total.
RDMAKIT_API Result<Manifest> verify_checkpoint(
    const std::string& checkpoint_path,
    const std::function<void(std::uint64_t done, std::uint64_t total)>& progress = {});
// One node's copy of a checkpoint, verified. With node-local directories (docs/ckpt.md, "Multi-rank commit
// and cluster checkpoints") a node's `ckpt-<step>` holds the whole job's manifest but only its own ranks'
// data files, each beside its shard manifest `rank-<r>.manifest`.
struct NodeVerification {
  Manifest manifest{};
  std::vector<std::uint32_t> verified{};   // files (index = rank) whose every chunk checked here
  std::vector<std::uint32_t> elsewhere{};  // files with neither data nor shard manifest here: other nodes'
};
// verify_checkpoint() for one node's directory: a rank's data file whose data and shard manifest are both
// absent is another node's (listed in `elsewhere`, not an error); a data file missing beside its shard
// manifest, or a one-file checkpoint's missing file, is an error naming it; NotFound when none is here.
RDMAKIT_API Result<NodeVerification> verify_node_checkpoint(
    const std::string& checkpoint_path,
    const std::function<void(std::uint64_t done, std::uint64_t total)>& progress = {});
// The manifest as readable text (what `rdmakit-ckpt show` prints).
RDMAKIT_API std::string describe_manifest(const Manifest& manifest);
// Writes one tensor as a numpy .npy file (format 1.0), after verifying the chunks it spans.
RDMAKIT_API Result<void> export_npy(const std::string& checkpoint_path, const std::string& tensor_name,
                                    const std::string& output_file);

}  // namespace rdmakit::ckpt
