// Many ranks, one consistent checkpoint (docs/ckpt.md, "Multi-rank commit").
//
// Each rank's `directory` is one every rank shares, or its node's own (node-local NVMe): at create the
// ranks learn which of them share a directory, and the lowest rank of each leads it. Every rank writes its
// shard (rank-<r>.data and rank-<r>.manifest, both fsynced) into <its dir>/.tmp-ckpt-<step>.group, pushing
// the same bytes to its replica meanwhile if it has one; the ranks then report over the communicator (an
// allgather of one flag each). Only when every shard is durable do they exchange their shard manifests,
// and each leader writes the global MANIFEST (one data file per rank, file index = rank) into its
// directory, fsyncs it and renames the directory to ckpt-<step>. An allreduce of the leaders' outcomes
// follows: the checkpoint is committed when every directory committed it (a directory that did while
// another failed takes it back), every rank learns the same outcome, and only then are old checkpoints
// deleted, so a crash between two directories' renames leaves each directory its previous checkpoints,
// and restore agrees on the newest step every rank still has (Engine::restore_latest).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/persist.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::coll {
class Communicator;
}

namespace rdmakit::ckpt::detail {

// Which ranks share this rank's directory: `leader` when this rank is the lowest there (it cleans what a
// crashed job left and commits the checkpoints written there); `directories`: how many the job writes into.
struct DirectoryGroup {
  bool leader = true;
  std::uint32_t directories = 1;
};
// Collective, in Engine::create: every rank creates its directory and leaves a marker naming its rank and
// a nonce of this meeting; after a barrier each rank reads the markers in its own directory.
Result<DirectoryGroup> meet_in_directories(coll::Communicator& comm, const std::string& directory,
                                           bool shared_group);

// Pure: the global manifest from each rank's shard manifest (shards[r] from rank r). Refuses shards that
// disagree on step, world size or chunk size, claim another rank, or hold other than one data file.
Result<Manifest> merge_shards(const std::vector<Manifest>& shards);
// Pure: rank `rank`'s part of a global manifest, as a one-file manifest (what the rank reads back).
Result<Manifest> shard_view(const Manifest& global, std::uint32_t rank);

// The persist thread's work for one multi-rank snapshot (job.options->communicator is set). When this
// rank (not rank 0) could not learn rank 0's decision (the broadcast failed: a rank died after every shard
// was reported), the outcome is unknown, not a failure: `outcome_unknown` is set and the error says why;
// the commit record on disk (committed_on_disk) settles it later.
Result<PersistReport> persist_group(Ring& ring, const PersistJob& job, bool& outcome_unknown);
// Whether checkpoint `step` is committed in `directory`: its directory's MANIFEST reads and is of that
// step. Unknown (nullopt) while rank 0 may still be deciding: its temporary directory is still there.
std::optional<bool> committed_on_disk(const std::string& directory, std::uint64_t step);

}  // namespace rdmakit::ckpt::detail
