// File segments read without their owner: a requester on the owner's host (the same boot) that can open the
// published file itself reads its READs from the file straight into its own memory, with io_uring, instead
// of asking the owner to read them into its ring and push them over a connection (the issue's "same host:
// the requester reads the file itself when it may").
//
// When it may: the owner's record names the file's absolute path and its inode (device and inode number);
// the requester opens that path read-only, with its own rights (so it reads nothing it could not read by
// hand), and uses it only when what it opened is that very inode, a regular file or block device at least
// as long as the segment. Anything else (another boot, a mount namespace where the path is another file or
// none, no permission, a file replaced since it was published) and the requests go to the owner as from
// another host. WRITEs always go to the owner: it enforces the segment's rights, serializes overlapping
// writes and makes them durable (sync_writes); device memory goes to the owner too (the transport's
// device path). EngineOptions::file_local_reads = false turns it off (to measure the owner's path).
//
// What the owner still guarantees holds: the published size bounds every READ (checked at submit against
// the record), a file that shrank fails the request naming the file and range, and the bytes are the
// file's. What changes: the owner's io_uring, ring and connection are not involved, so the owner cannot
// count or throttle these reads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/fd.hpp"
#include "rdmakit/error.hpp"
#include "xfer/engine/files.hpp"

namespace rdmakit::xfer::detail {

struct Peer;
struct SegmentRecord;

// The owner's file, opened by the requester.
struct LocalFile {
  std::string path;
  std::uint64_t size = 0;  // published
  Fd buffered;             // through the page cache
};

// Opens the file `record` names when this process is on its host (`local_boot`) and what the path leads
// to is the published inode; null when it may not (the reason is logged at debug level).
std::shared_ptr<const LocalFile> open_local_file(const SegmentRecord& record, std::string_view local_boot);

// One thread with its own io_uring reading file segments' READs into local memory, at most `depth` at
// once. Each op finishes as the owner's answer would finish it (finish_file_op): its peer's credit back.
class LocalFileReader {
 public:
  static Result<std::unique_ptr<LocalFileReader>> start(unsigned depth);
  // Waits for the reads in flight, fails what is still queued and what is queued later (ConnectionBroken:
  // the engine is closing). Not from a callback it runs.
  void stop();
  ~LocalFileReader();  // stops
  LocalFileReader(const LocalFileReader&) = delete;
  LocalFileReader& operator=(const LocalFileReader&) = delete;

  // `ops` each name their file (FileOp::read_locally); their credits were taken from `peer`.
  void queue(std::shared_ptr<Peer> peer, std::vector<FileOp> ops);

 private:
  struct Read;
  class Loop;
  explicit LocalFileReader(std::unique_ptr<Loop> loop);
  std::unique_ptr<Loop> loop_;
};

}  // namespace rdmakit::xfer::detail
