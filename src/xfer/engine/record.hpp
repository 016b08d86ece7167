// What an owner publishes for one segment, and how a peer picks the transport to reach it. Pure logic.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/error.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::xfer::detail {

// One rail of the owner: a transport (on one device), the address its listener has, and the segment's
// descriptor in that rail's context (keys and epochs differ per context).
struct RailEntry {
  std::string transport;
  std::string address;
  RemoteRegion region;

  bool operator==(const RailEntry& other) const {
    return transport == other.transport && address == other.address &&
           region.serialize() == other.region.serialize();
  }
};

struct SegmentRecord {
  std::string owner;  // the owner engine's name
  std::string host;   // host_id() of the owner: equal means shm can reach it
  std::uint64_t length = 0;
  std::vector<RailEntry> rails;
  // A file segment (Engine::publish_file): its rails' descriptors carry only the owner's epoch (no memory
  // of the owner is reachable through them); the requests go to the owner's file server.
  bool file = false;
  bool writable = true;  // file segments: false refuses WRITEs (the owner enforces it)
  // File segments: where the owner's file is on its host and which inode it is, so a requester on the same
  // host (the same boot) may read it itself (files_local.hpp): only when the path it opens is that very
  // inode. Empty path: the owner offers no local reads.
  std::string path;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;

  bool operator==(const SegmentRecord&) const = default;
};

// The metadata key of a segment name.
std::string segment_key(std::string_view name);

// The record's body (what seal() protects).
std::vector<std::byte> encode(const SegmentRecord& record);
// Refuses anything that is not a well-formed record (the bytes come from the metadata store: untrusted).
Result<SegmentRecord> decode(std::span<const std::byte> bytes);

// What is published: the body sealed with AES-256-GCM under a key derived from `secret` (the engine's
// auth::service_secret), the segment's name as associated data. Anyone who can write the metadata store
// can put bytes under a name, but only a holder of the secret can make bytes that open_sealed() takes: a
// record forged, altered, or moved to another name is refused before any field is used. The body is also
// encrypted, so a stranger who can read the store does not learn the owner's descriptors (address and rkey).
Result<std::vector<std::byte>> seal(const SegmentRecord& record, std::string_view name,
                                    std::string_view secret);
// Errc::ConnectionRefused when the bytes were not sealed for `name` with
// `secret`; ProtocolError when they are not a sealed record at all.
Result<SegmentRecord> open_sealed(std::span<const std::byte> bytes, std::string_view name,
                                  std::string_view secret);

// The secret an engine seals its records and proves its connections with: auth::service_secret for the
// host of `listen_address` (the job secret; without one, on loopback, the per-user secret).
Result<std::string> engine_secret(std::string_view listen_address);

// The label of the engine's peer proof (bootstrap/peer_proof.hpp): a proof for another service is none here.
inline constexpr std::string_view kPeerProofLabel = "rdmakit-xfer-engine/v1";

// This host as shm sees it: the boot id and the network namespace (shm's sockets are abstract Unix
// sockets, which are per network namespace).
std::string host_id();
// The boot a host_id() names (what a file path means depends on it; the network namespace does not).
std::string_view boot_of(std::string_view host);

// A transport an engine offers, with the properties of its Capabilities that choose_transport weighs.
struct OfferedTransport {
  std::string name;
  bool same_host_only = false;  // Capabilities::same_host_only
  bool kernel_bypass = false;   // Capabilities::kernel_bypass
};

// The transport to reach `record` from an engine with `local` transports on `local_host`: `forced` when set
// (and offered by both), else, among those both offer that reach the owner: a same-host-only one for an
// owner on this host (shm), then a kernel-bypass one (verbs), then any (tcp); ties in `local`'s order.
// NotSupported when none is shared.
Result<std::string> choose_transport(std::span<const OfferedTransport> local, std::string_view local_host,
                                     const SegmentRecord& record, std::string_view forced);

// The owner's rails of `transport`, in order.
std::vector<const RailEntry*> rails_of(const SegmentRecord& record, std::string_view transport);

}  // namespace rdmakit::xfer::detail
