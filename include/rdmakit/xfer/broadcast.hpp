// Weights broadcast: one owner's buffer to N receivers through a pipelined chain.
//
// sender -> receiver 1 -> receiver 2 -> ... -> receiver N. The buffer moves in chunks, each a WRITE with
// immediate (the immediate is the chunk's number) into the next receiver's registered memory. A receiver
// learns that chunk k landed from the receive completion that the WRITE with immediate consumes, and only
// then forwards chunk k to its successor (from its own memory, never before the bytes are there). Every hop
// moves every chunk once, at the same time as the others, so the total time is about one transfer plus
// (N - 1) chunk times, whatever N is.
//
// The chain meets in the metadata store: receiver r publishes "xfer/bcast/<session>/<r>" (its listener
// address and destination descriptor); its predecessor looks it up and connects.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "rdmakit/context.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"
#include "rdmakit/xfer/metadata.hpp"

namespace rdmakit::xfer {

struct BroadcastOptions {
  std::string session = "weights";  // names the chain (several chains may run at once)
  std::uint32_t receivers = 1;      // N
  std::uint64_t size = 0;           // bytes to move (every receiver's region holds at least this)
  std::uint64_t chunk_bytes = 4 << 20;
  std::uint32_t window = 8;                  // chunks in flight per hop
  std::string listen_address{};              // receivers: where to listen; empty: the context's default
  std::chrono::milliseconds timeout{60000};  // the whole broadcast, chain set-up included
};

struct BroadcastResult {
  std::chrono::nanoseconds elapsed{};  // from the chain being connected to the last chunk done here
  std::uint64_t chunks = 0;
};

// The owner: pushes options.size bytes of `source` (LocalWrite not needed) to receiver 1.
RDMAKIT_API Result<BroadcastResult> broadcast_send(Context& context, MetadataStore& metadata,
                                                   const MemoryRegion& source,
                                                   const BroadcastOptions& options);
// Receiver `rank` (1..N): receives into `destination` (RemoteWrite) and forwards to rank + 1. Returns when
// every chunk landed here and was forwarded (its successor completed the WRITE).
RDMAKIT_API Result<BroadcastResult> broadcast_receive(Context& context, MetadataStore& metadata,
                                                      const MemoryRegion& destination, std::uint32_t rank,
                                                      const BroadcastOptions& options);

}  // namespace rdmakit::xfer
