// The checkpoint engine: snapshot application state into staging memory in the time of a memcpy, persist
// it to disk in the background, and restore the newest good checkpoint after a crash.
//
//   auto engine = rdmakit::ckpt::Engine::create({.directory = "/nvme/run1"}, {{"w", w.data(), w.size() * 4,
//                                                 DType::F32, {1024, 256}}});
//   if (auto step = (*engine)->restore_latest()) start = *step + 1;   // NotFound on a fresh start
//   for (step = start; ...; ++step) { train(); if (step % 10 == 0) (*engine)->snapshot(step); }
//
// snapshot() returns once every buffer is copied into the engine's staging memory (one buffer of the
// state's size, aligned for O_DIRECT, reused by every snapshot); a background thread then writes it with
// io_uring, checksums every chunk, and commits it with fsyncs and an atomic rename (docs/ckpt.md has the
// on-disk format and the guarantees). Staging holds one snapshot: a snapshot() issued while the previous
// one is still being persisted waits for it.
//
// Errors of the background work (disk full, I/O error) are kept and returned by the next call into the
// engine (snapshot, wait_persisted, restore_latest), once; the checkpoint that failed is not committed and
// the previous ones stay intact.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdmakit/ckpt/types.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit::coll {
class Communicator;
}

namespace rdmakit::ckpt {

struct EngineOptions {
  std::string directory{};  // checkpoints live in <directory>/ckpt-<step>; created if missing
  // Tunables: left empty, each comes from its option (RDMAKIT_CKPT_<NAME>), else the default;
  // Engine::options() shows them all filled in.
  std::optional<std::uint32_t> keep{};  // ckpt_keep, 3: committed checkpoints kept (>= 1); older ones deleted
  std::optional<std::size_t>
      chunk_bytes{};  // ckpt_chunk_bytes, 4 MiB: write and checksum unit; a multiple of 4096
  std::optional<std::uint32_t> io_depth{};  // ckpt_io_depth, 4: writes in flight (1..256)
  std::optional<std::uint32_t>
      copy_threads{};               // ckpt_copy_threads, min(4, cores): threads splitting the snapshot copy
  std::optional<bool> direct_io{};  // ckpt_direct_io, yes: O_DIRECT; falls back to buffered I/O (with a
                                    // warning) if refused
  // Lazy mode: snapshot() only records the step and returns; the copy into staging runs in the background
  // (during the next forward and backward pass). The application must not write any buffer until
  // wait_snapshot() returns, which it calls before its optimizer step: that is then the only stall.
  bool lazy = false;
  // Incremental: a chunk whose checksum equals the previous checkpoint's (this engine's last commit, or
  // the one restored) is not written; the manifest references the checkpoint that holds it, and retention
  // keeps that one while any kept checkpoint references it (docs/ckpt.md). Single-rank engines only.
  bool incremental = false;
  std::uint32_t rank = 0;        // this process's rank and the job's world size, recorded in the
  std::uint32_t world_size = 1;  // manifest; restore refuses a checkpoint of another world size
  // Many ranks, one checkpoint: with a communicator, rank and world_size are its own, and every rank writes
  // its shard into its `directory`: one that every rank shares, or its node's own (node-local NVMe; the
  // ranks learn at create which of them share one). The checkpoint is committed in every directory only
  // when every rank's shard is durable, and restore takes the newest step every rank still has, on its
  // disk or in its replica (docs/ckpt.md, "Cluster checkpoints"). The engine issues collectives on it from
  // its background thread, so it must be a communicator the application does not use itself (create one with
  // its own CommOptions::key_prefix), and its timeout must exceed the slowest rank's persist time. Every rank
  // calls create(), snapshot() and restore_latest() in the same order. Must outlive the engine.
  coll::Communicator* communicator = nullptr;
  // Peer-memory replica: the address of an `rdmakit-ckpt serve` (its transport: RDMAKIT_TRANSPORT, tcp by
  // default). Each committed checkpoint is also written into the server's memory (one-sided WRITEs into
  // memory it registered, staging registered here), and restore_latest() takes the server's newest replica
  // when it is at least as new as the newest checkpoint on disk. With a communicator, each rank names the
  // server that holds its replica (on another node: a node lost with its disk is restored from the
  // others' servers), or every rank gives the same comma-separated list of one server per host, in the
  // order of the hosts' lowest ranks (Communicator::host_rank), and each rank takes the next host's (a ring
  // over the nodes, never its own); the push runs while the shard is written to disk, and restore takes a
  // rank's replica when its disk lacks the step every rank agreed on. Both sides
  // prove the secret first (RDMAKIT_JOB_SECRET; on a loopback server without one, the per-user secret),
  // and a replica is restored only if its manifest's MAC under that secret and every chunk verify.
  std::string replica{};
  // Test hook for crash tests: the persist thread raises SIGKILL on its own process when it reaches this
  // numbered point of the commit (see CrashPoint in src/ckpt/persist.hpp). 0 = never.
  int crash_point = 0;
  // The CUDA runtime that buffers of MemoryKind::Cuda are copied with, loaded with dlopen (nothing links
  // CUDA): a file name or path. Empty: libcudart.so.13, .12, .11.0, then libcudart.so (the loader's
  // search path). Untested on a GPU (docs/ckpt.md).
  std::string cuda_runtime{};
  // ckpt_replica_timeout_ms, 10000: how long create() waits for the replica server to connect, prove the
  // job secret and answer the Hello (Timeout naming the address when it does not).
  std::optional<std::uint32_t> replica_timeout_ms{};
  // ckpt_shared_group, no: checkpoint directories and files are created 0700 / 0600 (this uid only);
  // yes: 0750 / 0640, for jobs whose ranks are different users of one group.
  std::optional<bool> shared_group{};
  // Per-commit completion: called once for every snapshot handed to the persist thread, with its step and
  // its outcome (the report once committed, or the error), on the persist thread right after the commit
  // or failure (a multi-rank outcome this rank could not learn: when the next call settles it, on that
  // call's thread). The background error is still returned by the next call as well. It must not call
  // into the engine, and should be quick: the next snapshot waits for it.
  std::function<void(std::uint64_t step, const Result<PersistReport>& outcome)> on_persisted{};
};

class RDMAKIT_API Engine {
 public:
  // Checks the buffers (unique non-empty names, sizes matching shapes) and allocates staging; with CUDA
  // buffers, also loads the CUDA runtime and checks that they are device memory (Unavailable when no
  // usable runtime or device is there, the message says which).
  static Result<std::unique_ptr<Engine>> create(EngineOptions options, std::vector<Buffer> buffers);
  // Waits for the checkpoint being persisted (it is committed or fails) and stops the background thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Copies every buffer into staging and hands the copy to the background persist; returns when the
  // buffers may be modified again. Returns a pending background error instead (nothing is snapshotted).
  // Lazy mode: returns at once and copies in the background; the buffers may be modified again only
  // after wait_snapshot().
  Result<void> snapshot(std::uint64_t step);
  // Returns when the copy of the last snapshot() is complete (at once unless lazy), or a pending background
  // error (once). In lazy mode, call it before the buffers change (the optimizer step).
  Result<void> wait_snapshot();
  // Waits until the last snapshot is committed on disk and reports it (NotFound when none was taken).
  Result<PersistReport> wait_persisted();
  // Loads the newest checkpoint whose manifest and every chunk checksum verify into the buffers, and
  // returns its step. A torn or corrupted checkpoint is reported (a warning naming the file and chunk) and
  // skipped for the previous one. NotFound when no good checkpoint exists and the buffers are untouched.
  // Host buffers are loaded chunk by chunk as each one verifies (overlapped with the reads), so a damaged
  // checkpoint may have overwritten part of them before its bad chunk was found: when no good checkpoint
  // follows, the error is then ProtocolError (not NotFound), saying so.
  Result<std::uint64_t> restore_latest();
  // Loads checkpoint `step` (on disk, verified as restore_latest() does) into the buffers and returns the
  // step; NotFound when no checkpoint of that step is in the directory, or when it does not verify (logged)
  // and the buffers are untouched (ProtocolError when a damaged one overwrote part of them). Never another
  // step, and never the replica. With a communicator: collective, every rank loads that step or none does.
  Result<std::uint64_t> restore(std::uint64_t step);
  // Subset restore, as torch.distributed.checkpoint loads some keys: as restore_latest() / restore(step),
  // but only the buffers named in `only` are written (empty: every one); every other buffer is left byte
  // for byte as it was (nothing is copied into it, in place or from staging). A name that is not one of
  // this engine's buffers is InvalidArgument naming it, before anything is read. The checkpoint must still
  // be this engine's whole state, and it is verified as a whole: every chunk of this rank's shard is read
  // and checked, those of the buffers not loaded included, so a subset restore costs the reads of a full
  // one. With a communicator: collective as the others, each rank naming its own buffers; when one rank
  // refuses its list, every rank returns InvalidArgument and none reads.
  Result<std::uint64_t> restore_latest(const std::vector<std::string>& only);
  Result<std::uint64_t> restore(std::uint64_t step, const std::vector<std::string>& only);

  const EngineOptions& options() const noexcept;
  // Where the last successful restore's data came from: the checkpoint directory it was read from, or
  // "replica at <address>" (empty before any). With a communicator, each rank's own shard's source.
  std::string restored_from() const;
  std::size_t state_bytes() const noexcept;    // sum of the buffers' sizes
  std::size_t staging_bytes() const noexcept;  // memory the engine holds for staging

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_{};
};

}  // namespace rdmakit::ckpt
