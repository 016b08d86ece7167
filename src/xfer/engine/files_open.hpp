// Opening a file to publish as a file segment (publish_file, publish_directory): what is opened, and which
// files are refused before a peer can read a byte of them.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "core/fd.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::xfer::detail {

// A file publish_file() opened: the only files the server reads (and writes, when writable).
struct PublishedFile {
  std::string name;
  std::string path;
  Fd fd;
  Fd buffered;          // writable and direct: the same file without O_DIRECT, for a last partial block
  bool direct = false;  // opened with O_DIRECT (the file system took it)
  std::uint64_t size = 0;
  bool writable = false;
  // Where the file is for a requester on this host (files_local.hpp): the absolute path of what we opened
  // (empty when it has none: deleted, or not reachable by a path) and its inode.
  std::string absolute_path;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
};

// Opens `entry` relative to `dir` (AT_FDCWD for publish_file; the directory's descriptor and O_NOFOLLOW for
// publish_directory) into `file`: read-write when writable, O_DSYNC with sync_writes, O_DIRECT where the
// file system takes it. Refuses what is neither a regular file nor a block device, an empty one, and (unless
// `allow_other_writers`) a file another uid may change (check_writers).
Result<void> open_published(PublishedFile& file, int dir, const std::string& entry, bool no_follow,
                            bool sync_writes, bool allow_other_writers);

// The uid rule of file segments, as shm's is for its peers: what a segment serves may be changed only by our
// uid (and root, which can change anything anyway). A file owned by another uid (its owner can always chmod
// it and write), or one everyone or a shared group may write, could be rewritten under the segment by that
// uid, and every reader would get that uid's bytes as ours: InvalidArgument naming the file, its owner and
// mode. Group write of our own user private group is no other writer.
// `euid`: ours (a parameter, for tests).
Result<void> check_writers(const struct stat& st, uid_t euid, const std::string& what);

}  // namespace rdmakit::xfer::detail
