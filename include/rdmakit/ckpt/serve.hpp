// `rdmakit-ckpt serve`: the peer that holds each rank's newest checkpoint in memory it registered, written
// by engines with one-sided WRITEs (EngineOptions::replica), over any rdmakit transport. It keeps two
// slots per rank within a memory budget (the newest complete replica stays intact while the next is
// written), verifies every replica's checksums while no rank is pushing (and again before serving one; one
// that does not verify is dropped and the replica before it is the newest again), and with a persist
// directory verifies each one at once and writes it to its own disk through the engine's persist pipeline.
// Protocol: src/ckpt/replica.hpp.
//
// Who may use it: every connection first proves the secret (RDMAKIT_JOB_SECRET, or on a loopback address
// the per-user secret, so only this uid); a non-loopback --listen without a job secret is an error unless
// insecure is set. A client proves the identity "rank <r>" and touches only rank r's slots. Ownership: the
// first proven connection of a rank that says Hello owns the rank's slots while it stays connected; a
// second connection of that rank is refused until the owner disconnects (a restarted process reconnects
// and takes over, keeping the replicas). Every proven peer holds the same secret, so this separates ranks
// of one job, it does not defend one rank against a hostile member of its own job.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit::ckpt {

struct ServeOptions {
  std::string listen{};                // "host:port"; empty: the transport's default (loopback)
  std::string transport{};             // empty: RDMAKIT_TRANSPORT, else tcp
  std::uint64_t budget_bytes = 0;      // memory for every rank's two slots together
  std::string persist_directory{};     // non-empty: each replica is also persisted there, per rank
  std::uint32_t keep = 2;              // checkpoints kept per rank under persist_directory
  std::string job_secret{};            // empty: RDMAKIT_JOB_SECRET, else (loopback only) the per-user secret
  std::uint32_t max_connections = 64;  // connections held at once (proving or proven); more are closed
  std::uint32_t proof_timeout_ms = 5000;  // a connection that has not proven the secret by then is closed
  std::uint64_t max_rank_bytes = 0;       // one rank's two slots at most; 0: budget_bytes
};

// What the server holds for one rank (for tests and `serve`'s log).
struct ReplicaInfo {
  std::uint64_t step = 0;
  std::uint64_t bytes = 0;
};

class RDMAKIT_API ReplicaServer {
 public:
  static Result<std::unique_ptr<ReplicaServer>> create(const ServeOptions& options);
  ~ReplicaServer();  // stops accepting, closes connections, joins every thread
  ReplicaServer(const ReplicaServer&) = delete;
  ReplicaServer& operator=(const ReplicaServer&) = delete;

  std::string address() const;
  std::optional<ReplicaInfo> newest(std::uint32_t rank) const;  // committed; verified, or being verified
  std::uint64_t used_bytes() const;

  struct Impl;

 private:
  explicit ReplicaServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdmakit::ckpt
