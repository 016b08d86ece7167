// Many ranks, one consistent checkpoint (docs/ckpt.md, "Multi-rank commit").
//
// Every rank writes its shard (rank-<r>.data and its own manifest rank-<r>.manifest, both fsynced) into one
// shared temporary directory <dir>/.tmp-ckpt-<step>.group; the ranks then report over the communicator
// (an allgather of one flag each). Only when every shard is durable does rank 0 read the shard manifests,
// merge them into the global MANIFEST (one data file per rank, file index = rank), fsync it and rename the
// directory to <dir>/ckpt-<step>: that rename is the commit, so a crash at any point leaves the new complete
// checkpoint or the previous ones. Rank 0 then broadcasts the outcome, so every rank's wait_persisted()
// reports the same thing, and no rank starts its next shard before a failed attempt is cleaned up.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/persist.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt::detail {

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
