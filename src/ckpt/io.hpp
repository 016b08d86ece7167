// The file-system side of checkpoints: aligned staging memory, an io_uring that keeps several chunk
// reads or writes in flight, and the directory operations a crash-safe commit needs.
#pragma once

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/fd.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::ckpt::detail {

// Faults in every page of [data, data + size) for writing now (MADV_POPULATE_WRITE, Linux 5.14), so the
// first transfer into it does not take a page fault per 4 KiB. Writes nothing; false where the kernel
// cannot (the pages then fault in on first use, as before).
bool populate_for_writing(void* data, std::size_t size) noexcept;

// Page-aligned anonymous memory (O_DIRECT needs aligned buffers), zero-filled, unmapped on destruction.
class AlignedBuffer {
 public:
  // `populate`: every page is faulted in now (MAP_POPULATE), not on first use: the engine's staging, whose
  // first snapshot otherwise stalled 4-7x the steady state faulting it in page by page.
  static Result<AlignedBuffer> allocate(std::size_t size, bool populate = false);
  AlignedBuffer() = default;
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  unsigned char* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

// One io_uring instance.
class Ring {
 public:
  static Result<Ring> create(unsigned depth);
  Ring(Ring&&) noexcept = default;
  Ring& operator=(Ring&&) noexcept = default;
  ~Ring();

  // Queues one read or write; submitted by the next wait().
  Result<void> queue(bool write, int fd, void* buffer, std::uint32_t length, std::uint64_t offset,
                     std::uint64_t tag);
  struct Done {
    std::uint64_t tag;
    std::int32_t result;  // bytes moved, or -errno
  };
  Result<Done> wait();
  unsigned depth() const noexcept { return depth_; }
  // Submits what is queued and returns a completion when one is there, without waiting (nullopt: none
  // yet): for a thread that serves the network beside its reads (the transfer engine's file segments).
  Result<std::optional<Done>> poll();
  // Registers [data, data + size) as the ring's fixed buffer 0 (io_uring_register_buffers: its pages are
  // pinned once instead of per read); queue_read_fixed() reads into it. It may fail (RLIMIT_MEMLOCK on
  // older kernels): the caller then reads with queue().
  Result<void> register_buffer(void* data, std::size_t size);
  Result<void> queue_read_fixed(int fd, void* buffer, std::uint32_t length, std::uint64_t offset,
                                std::uint64_t tag);
  // The same for a write from the fixed buffer (writable file segments).
  Result<void> queue_write_fixed(int fd, const void* buffer, std::uint32_t length, std::uint64_t offset,
                                 std::uint64_t tag);

 private:
  Ring(std::unique_ptr<io_uring> ring, unsigned depth) : ring_(std::move(ring)), depth_(depth) {}
  std::unique_ptr<io_uring> ring_;
  unsigned depth_ = 0;
};

// One chunk of a pipelined transfer.
struct IoChunk {
  std::uint64_t offset = 0;  // in the file; aligned for O_DIRECT
  std::uint64_t length = 0;  // bytes to transfer, rounded up to the alignment for O_DIRECT
  std::uint64_t needed = 0;  // a read that ends at end-of-file must move at least this many bytes
};

// Moves `chunks` between `fd` and memory with up to ring.depth() in flight, in chunk order of submission.
// buffer(i, slot) says where chunk i goes or comes from (slot: one of depth() slots, free while the chunk
// is in flight, for callers that stream through a few buffers). before(i) runs just before chunk i is
// queued, while earlier chunks are in flight (the checksum of chunk n+1 overlaps the write of chunk n);
// after(i) runs when chunk i has completed. The first failure stops new submissions; what is in flight is
// drained before returning, so no buffer is used after the call.
struct Pipeline {
  std::function<unsigned char*(std::size_t index, unsigned slot)> buffer;
  std::function<Result<void>(std::size_t index)> before;
  std::function<Result<void>(std::size_t index)> after;
};
Result<void> run_pipeline(Ring& ring, bool write, int fd, const std::vector<IoChunk>& chunks,
                          const Pipeline& steps, const std::string& file_name);

// Modes of what the engine creates: private to this uid by default (a checkpoint holds a model's weights);
// EngineOptions::shared_group (ckpt_shared_group) opens them to the group for jobs whose ranks run as
// different users of one group. The umask may take more away, never add.
struct FileModes {
  unsigned file = 0600;
  unsigned directory = 0700;
};
FileModes file_modes(bool shared_group) noexcept;

// Opens `path` with O_DIRECT when `direct` and the file system accepts it; `got_direct` says which. A file
// it creates gets `mode`.
Result<Fd> open_file(const std::string& path, int flags, bool direct, bool& got_direct, unsigned mode = 0600);
Result<void> fsync_fd(int fd, const std::string& what);
Result<void> fsync_directory(const std::string& path);
Result<void> write_whole_file(const std::string& path, const std::string& contents,
                              unsigned mode = 0600);  // with fsync
Result<std::string> read_whole_file(const std::string& path, std::uint64_t limit);
// mkdir -p; the directories it creates get `mode` (existing ones are left as they are).
Result<void> make_directory(const std::string& path, unsigned mode = 0700);
void remove_tree(const std::string& path) noexcept;  // best effort

std::uint64_t round_up(std::uint64_t value, std::uint64_t alignment) noexcept;

}  // namespace rdmakit::ckpt::detail
