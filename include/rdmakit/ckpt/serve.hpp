// `rdmakit-ckpt serve`: the peer that holds each rank's newest checkpoint in memory it registered, written
// by engines with one-sided WRITEs (EngineOptions::replica), over any rdmakit transport. It keeps two
// slots per rank within a memory budget (the newest complete replica stays intact while the next is
// written), verifies every replica's checksums before calling it complete, and with a persist directory
// writes each one to its own disk through the engine's persist pipeline. Protocol: src/ckpt/replica.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rdmakit/error.hpp"

namespace rdmakit::ckpt {

struct ServeOptions {
  std::string listen{};             // "host:port"; empty: the transport's default (loopback)
  std::string transport{};          // empty: RDMAKIT_TRANSPORT, else tcp
  std::uint64_t budget_bytes = 0;   // memory for every rank's two slots together
  std::string persist_directory{};  // non-empty: each replica is also persisted there, per rank
  std::uint32_t keep = 2;           // checkpoints kept per rank under persist_directory
};

// What the server holds for one rank (for tests and `serve`'s log).
struct ReplicaInfo {
  std::uint64_t step = 0;
  std::uint64_t bytes = 0;
};

class ReplicaServer {
 public:
  static Result<std::unique_ptr<ReplicaServer>> create(const ServeOptions& options);
  ~ReplicaServer();  // stops accepting, closes connections, joins every thread
  ReplicaServer(const ReplicaServer&) = delete;
  ReplicaServer& operator=(const ReplicaServer&) = delete;

  std::string address() const;
  std::optional<ReplicaInfo> newest(std::uint32_t rank) const;
  std::uint64_t used_bytes() const;

  struct Impl;

 private:
  explicit ReplicaServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdmakit::ckpt
