// The peer-memory replica: an engine copies each checkpoint into memory a peer registered, with one-sided
// WRITEs over any rdmakit transport, so a job that loses a process (or its disk) but not the peer restores
// from memory. The peer is ReplicaServer (`rdmakit-ckpt serve`): a memory budget, two slots per rank (the
// newest complete replica stays intact while the next one is written), and optionally the same persist
// pipeline to its own disk.
//
// Protocol, over one connection per rank (messages of the one message channel, data by WRITE and READ):
//   peer proof (bootstrap/peer_proof.hpp, label kProofLabel): the client proves the secret
//     (auth::service_secret: the job secret, else on loopback the per-user one) with the identity
//     "rank <r>"; the server learns nothing else before that and the rank is the proven one from then on
//   Hello  {rank, world_size, bytes}        -> HelloReply {descriptor of the rank's region, newest slot}
//   (client WRITEs a snapshot into the slot that is not the newest, then its manifest after the data)
//   Commit {step, slot, manifest_bytes,     -> CommitReply: the server decodes the manifest from its own
//           text: manifest MAC}                memory, checks it against the Hello and makes that slot the
//                                              newest; it verifies every chunk's checksum while no rank
//                                              pushes (a replica that does not verify is dropped, the one
//                                              before it is the newest again), or at once with --persist
//   Fetch  {}                               -> FetchReply {newest slot, step, manifest_bytes, text: the
//                                              manifest MAC} (client READs and verifies MAC and checksums)
//   Progress {slot, bytes, manifest_bytes}  -> ProgressReply at once: a push is under way (the client sends
//     one before its first WRITE and one per 32 MiB placed), so the server polls closely for its next
//     message and defers its verifications (they would take the CPU the push's transport needs).
//   Steps  {}                               -> StepsReply {text: the steps held, newest first}
//   FetchStep {step}                        -> FetchReply of that step: the newest, or the replica before it
//                                              while its slot is intact (a multi-rank restore agrees on a
//                                              step that may be older than a replica pushed but never
//                                              committed)
// Everything a client writes is input: messages are decoded with checks, manifests decoded and checked,
// data verified before it is called complete. Everything a server returns is input too: the client
// restores only a manifest whose MAC under the secret binds this rank, world size and step, and data whose
// every chunk matches it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/message_channel.hpp"
#include "rdmakit/ckpt/serve.hpp"
#include "rdmakit/ckpt/store.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::ckpt::detail {

inline constexpr std::size_t kMessageBytes = 256;  // a frame's largest size, rounded up
inline constexpr std::size_t kMessageText = 208;
inline constexpr std::uint64_t kReplicaManifestArea = 1ull << 20;  // per slot, after the data
inline constexpr std::uint64_t kMaxReplicaBytes = 1ull << 40;      // a Hello's largest state
inline constexpr std::string_view kProofLabel = "rdmakit-ckpt-replica/v1";
inline constexpr std::string_view kServiceName = "the replica server";

enum class MessageType : std::uint16_t {
  Hello = 1,
  HelloReply,
  Commit,
  CommitReply,
  Fetch,
  FetchReply,
  Steps,  // -> StepsReply: the steps of the intact replicas held, newest first, as decimal text
  StepsReply,
  FetchStep,      // {step} -> FetchReply of the replica of that step (the newest or the one before it)
  Progress,       // {slot, bytes placed, manifest_bytes: chunk size} -> ProgressReply: a push is under
  ProgressReply,  // way (the server defers its verifications until none is)
};

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

// The messages are frames of the one message channel (core/message_channel.hpp): its header (magic,
// version, type, length), then the fields from rank to status and the text (at most kMessageText - 1 bytes).
extern const rdmakit::detail::FrameSpec kReplicaSpec;
// The fields after the header into `out` (kMessageBytes is room enough); the bytes written.
std::span<const std::byte> encode_payload(const Message& message, std::span<std::byte> out);
Result<Message> decode_payload(const rdmakit::detail::Frame& frame);
// The whole frame, as the peer receives it.
std::vector<std::byte> encode_message(const Message& message);
// Checks the frame (magic, version, type, length) and the fields; the error names what is wrong.
Result<Message> decode_message(const std::byte* data, std::size_t size);

// The identity a client proves: "rank <r>"; the server takes the rank from it, never from a message.
std::string rank_identity(std::uint32_t rank);
std::optional<std::uint32_t> parse_rank_identity(std::string_view identity);
// The host part of "host:port" / "[v6]:port" (auth::service_secret decides by it).
std::string host_of(std::string_view address);
// MAC (hex) under the secret over a replica's manifest text, binding rank, world size and step: what a
// client checks before it restores anything a server returns.
std::string manifest_mac(std::string_view secret, std::uint32_t rank, std::uint32_t world_size,
                         std::uint64_t step, std::string_view manifest_text);

// Bytes of one slot of a rank's region: the data rounded up to 4 KiB, then the manifest area.
std::uint64_t replica_slot_bytes(std::uint64_t state_bytes);

// The engine's side: one connection to the server, the engine's staging registered for WRITE and READ.
class ReplicaClient {
 public:
  struct Settings {
    // Bounds the connection, the proof and the Hello (Timeout naming the address when it passes); pushes
    // and fetches wait longer (the server verifies and may persist).
    std::chrono::milliseconds timeout{10000};
    std::string secret{};  // non-empty: this key instead of auth::service_secret's (tests)
  };
  static Result<ReplicaClient> connect(const std::string& address, std::uint32_t rank,
                                       std::uint32_t world_size, unsigned char* staging,
                                       std::size_t staging_size, std::uint64_t bytes);
  static Result<ReplicaClient> connect(const std::string& address, std::uint32_t rank,
                                       std::uint32_t world_size, unsigned char* staging,
                                       std::size_t staging_size, std::uint64_t bytes,
                                       const Settings& settings);
  ReplicaClient(ReplicaClient&&) noexcept;
  ReplicaClient& operator=(ReplicaClient&&) noexcept;
  ~ReplicaClient();

  // WRITEs staging and `manifest` (one file of `bytes`, no chunk references) into the slot that is not the
  // newest, then commits it; returns once the server verified it.
  Result<void> push(const Manifest& manifest);
  // push() in two parts, so the data travels while the manifest's checksums are still being computed (a
  // multi-rank engine pushes while it writes its shard to disk): the data, then the manifest and commit.
  Result<void> push_data(std::uint64_t chunk_bytes);
  Result<void> push_manifest(const Manifest& manifest);
  // The server's newest replica: its manifest, the data READ into staging and every chunk verified.
  // NotFound when the server holds none for this rank.
  Result<Manifest> fetch();
  // The replica of `step` (the newest, or the one before it while intact), read and verified as fetch().
  Result<Manifest> fetch(std::uint64_t step);
  // The steps of the replicas the server holds for this rank, newest first (empty when none).
  Result<std::vector<std::uint64_t>> held_steps();
  // The newest replica's step without reading it (NotFound when none).
  Result<std::uint64_t> newest_step();

  struct State;

 private:
  explicit ReplicaClient(std::unique_ptr<State> state);
  Result<Manifest> fetch_replica(std::optional<std::uint64_t> step);
  std::unique_ptr<State> state_;
};

}  // namespace rdmakit::ckpt::detail
