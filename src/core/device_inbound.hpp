// The staged path into device memory for a transport whose CPU receives the bytes (tcp): a payload bound for
// device memory arrives chunk by chunk in pinned host slots, and each full slot is copied to the device with
// cudaMemcpyAsync on the library's stream while the socket fills the next one. The network and the copy
// engine overlap, `depth` chunks in flight (the peers' staged paths copy the whole message after it
// arrived, or one chunk at a time: UCX's pipeline protocols do what this does).
//
// A slot is refilled only after the event recorded behind its copy passed (the copy engine reads it until
// then), and finish() waits for the last copies: the transport acknowledges a payload only once its bytes
// are in device memory, as before. A payload's chunk is a quarter of it, between 64 KiB and the pool's
// chunk (4 MiB by default), so a 1 MiB or 4 MiB message is pipelined too, not only messages of many chunks.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/pinned_pool.hpp"
#include "cuda/api.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::detail {

// One connection's receiving side of the staged path: used by the thread that reads the connection, one
// payload at a time.
class DeviceInbound {
 public:
  explicit DeviceInbound(std::shared_ptr<PinnedSlotPool> pool) : pool_(std::move(pool)) {}
  ~DeviceInbound() { abandon(); }
  DeviceInbound(const DeviceInbound&) = delete;
  DeviceInbound& operator=(const DeviceInbound&) = delete;

  // A payload bound for `sink` (device memory, filled in order). `what` names the operation in errors.
  void begin(std::span<const iovec> sink, const char* what);
  // Bytes of the payload not yet given a chunk.
  std::uint64_t unassigned() const noexcept { return unassigned_; }
  // Where the next bytes of the payload land: at most one chunk of what is left (never empty while
  // unassigned() > 0). Waits until the slot's previous copy ran. After an error the bytes still have to be
  // read off the connection: they land in scratch memory and finish() reports the error.
  iovec next_chunk();
  // The chunk from next_chunk() is full: its copy to the sink is queued.
  void chunk_filled();
  // Every copy of the payload ran; its first error otherwise. The slots go back to the pool.
  Result<void> finish();
  // The payload will not complete (the connection failed): waits for the copies already queued (they
  // read the slots and write the sink, which must stay valid until then) and gives the slots back.
  void abandon();

 private:
  struct Target {
    iovec sink;
    int device;
  };
  Result<void> wait_for(PinnedSlotPool::Slot& slot);
  Result<void> queue_copy(PinnedSlotPool::Slot& slot, std::size_t bytes);
  void advance(std::size_t bytes);  // the sink position moves on
  Result<void> wait_all();
  void record(Result<void> step);

  std::shared_ptr<PinnedSlotPool> pool_;
  const char* what_ = "";
  std::vector<Target> targets_;
  std::size_t target_ = 0;         // the sink iovec the next copied byte goes to
  std::size_t target_offset_ = 0;  // ... and where in it
  std::uint64_t unassigned_ = 0;
  std::size_t chunk_ = 0;  // this payload's chunk
  std::vector<std::unique_ptr<PinnedSlotPool::Slot>> slots_;
  std::size_t next_slot_ = 0;
  std::size_t filling_ = 0;  // bytes the chunk being filled takes
  Result<void> error_;
  std::vector<std::byte> scratch_;  // after an error: where the rest of the payload is read to
};

}  // namespace rdmakit::detail
