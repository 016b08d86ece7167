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

  bool operator==(const SegmentRecord&) const = default;
};

// The metadata key of a segment name.
std::string segment_key(std::string_view name);

std::vector<std::byte> encode(const SegmentRecord& record);
// Refuses anything that is not a well-formed record (the bytes come from the metadata store: untrusted).
Result<SegmentRecord> decode(std::span<const std::byte> bytes);

// This host as shm sees it: the boot id and the network namespace (shm's sockets are abstract Unix
// sockets, which are per network namespace).
std::string host_id();

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
