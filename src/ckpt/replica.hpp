// The peer-memory replica: an engine copies each checkpoint into memory a peer registered, with one-sided
// WRITEs over any rdmakit transport, so a job that loses a process (or its disk) but not the peer restores
// from memory. The peer is ReplicaServer (`rdmakit-ckpt serve`): a memory budget, two slots per rank (the
// newest complete replica stays intact while the next one is written), and optionally the same persist
// pipeline to its own disk.
//
// Protocol, over one connection per rank (SEND/RECV of fixed 256-byte messages, data by WRITE and READ):
//   Hello  {rank, world_size, bytes}        -> HelloReply {descriptor of the rank's region, newest slot}
//   (client WRITEs a snapshot into the slot that is not the newest, then its manifest after the data)
//   Commit {step, slot, manifest_bytes}     -> CommitReply: the server decodes the manifest from its own
//                                              memory, checks it against the Hello, verifies every chunk's
//                                              checksum, and only then makes that slot the newest
//   Fetch  {}                               -> FetchReply {newest slot, step, manifest_bytes} (client READs)
// Everything a client writes is input: messages are decoded with checks, manifests decoded and checked,
// data verified before it is called complete.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rdmakit/ckpt/serve.hpp"
#include "rdmakit/ckpt/store.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::ckpt::detail {

inline constexpr std::size_t kMessageBytes = 256;
inline constexpr std::size_t kMessageText = 208;
inline constexpr std::uint64_t kReplicaManifestArea = 1ull << 20;  // per slot, after the data

enum class MessageType : std::uint16_t { Hello = 1, HelloReply, Commit, CommitReply, Fetch, FetchReply };

struct Message {
  MessageType type = MessageType::Hello;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 0;
  std::uint64_t step = 0;
  std::uint64_t bytes = 0;
  std::uint64_t manifest_bytes = 0;
  std::uint32_t slot = 0;
  std::uint32_t status = 0;  // 0 ok; else the request failed and `text` says why
  std::string text;          // descriptor hex (HelloReply) or the reason of a failure
};

using MessageBytes = std::array<std::byte, kMessageBytes>;
MessageBytes encode_message(const Message& message);
// Checks magic, version, type and the text's termination; the error names what is wrong.
Result<Message> decode_message(const std::byte* data, std::size_t size);

// Bytes of one slot of a rank's region: the data rounded up to 4 KiB, then the manifest area.
std::uint64_t replica_slot_bytes(std::uint64_t state_bytes);

// The engine's side: one connection to the server, the engine's staging registered for WRITE and READ.
class ReplicaClient {
 public:
  static Result<ReplicaClient> connect(const std::string& address, std::uint32_t rank,
                                       std::uint32_t world_size, unsigned char* staging,
                                       std::size_t staging_size, std::uint64_t bytes);
  ReplicaClient(ReplicaClient&&) noexcept;
  ReplicaClient& operator=(ReplicaClient&&) noexcept;
  ~ReplicaClient();

  // WRITEs staging and `manifest` (one file of `bytes`, no chunk references) into the slot that is not the
  // newest, then commits it; returns once the server verified it.
  Result<void> push(const Manifest& manifest);
  // The server's newest replica: its manifest, the data READ into staging and every chunk verified.
  // NotFound when the server holds none for this rank.
  Result<Manifest> fetch();
  // The newest replica's step without reading it (NotFound when none).
  Result<std::uint64_t> newest_step();

  struct State;

 private:
  explicit ReplicaClient(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace rdmakit::ckpt::detail
