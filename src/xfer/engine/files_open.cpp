#include "xfer/engine/files_open.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

namespace rdmakit::xfer::detail {

namespace {
// A user private group (Debian's default: the group named after its one user, umask 002) adds no writer:
// our own group that lists no members. Other users whose primary group it is are not listed; a system that
// gives users a shared primary group should keep group write off the files it publishes, or set
// allow_other_writers.
bool private_group(gid_t gid) {
  if (gid != ::getegid()) return false;
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  if (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) return false;
  return found->gr_mem == nullptr || found->gr_mem[0] == nullptr;
}
// The absolute path of what `fd` is open on, in our mount namespace; empty when it has none.
std::string absolute_path_of(int fd) {
  std::vector<char> buffer(4096);
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  auto n = ::readlink(self.c_str(), buffer.data(), buffer.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= buffer.size() || buffer[0] != '/') return {};
  std::string path(buffer.data(), static_cast<std::size_t>(n));
  if (path.ends_with(" (deleted)")) return {};
  return path;
}
}  // namespace

Result<void> check_writers(const struct stat& st, uid_t euid, const std::string& what) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  std::string found = " (owner uid " + std::to_string(st.st_uid) + ", mode " + mode + ")";
  std::string why =
      ": peers would read whatever that uid writes there as this engine's bytes; publish a copy "
      "of ours, or set FileSegmentOptions::allow_other_writers";
  if (st.st_uid != euid && st.st_uid != 0)
    return fail(Errc::InvalidArgument,
                what + " belongs to another uid than ours (" + std::to_string(euid) + ")" + found + why);
  if ((st.st_mode & S_IWOTH) != 0)
    return fail(Errc::InvalidArgument, what + " may be written by everyone" + found + why);
  if ((st.st_mode & S_IWGRP) != 0 && !private_group(st.st_gid))
    return fail(Errc::InvalidArgument,
                what + " may be written by group " + std::to_string(st.st_gid) + found + why);
  return {};
}

// O_NONBLOCK: opening a FIFO for reading would wait for a writer (publish_file hung on one); it is refused
// below as not a regular file. On the file kept it goes again, or io_uring would fail reads with EAGAIN.
// O_DIRECT where the file system takes it (tmpfs does not: EINVAL, then the page cache).
Result<void> open_published(PublishedFile& file, int dir, const std::string& entry, bool no_follow,
                            bool sync_writes, bool allow_other_writers) {
  const int flags = (file.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | (sync_writes ? O_DSYNC : 0);
  const int open_flags = flags | O_NONBLOCK | (no_follow ? O_NOFOLLOW : 0);
  file.fd.reset(::openat(dir, entry.c_str(), open_flags | O_DIRECT));
  file.direct = static_cast<bool>(file.fd);
  if (!file.fd && errno == EINVAL) file.fd.reset(::openat(dir, entry.c_str(), open_flags));
  if (!file.fd) return fail_errno("publish_file '" + file.name + "': opening " + file.path, errno);
  if (::fcntl(file.fd.get(), F_SETFL, ::fcntl(file.fd.get(), F_GETFL) & ~O_NONBLOCK) != 0)
    return fail_errno("publish_file '" + file.name + "': fcntl of " + file.path, errno);
  struct stat st {};
  if (::fstat(file.fd.get(), &st) != 0) return fail_errno("publish_file: stat of " + file.path, errno);
  // A block device only by name (publish_file): a directory's shards are regular files, and a device node
  // swapped in after publish_directory listed the entry is refused here.
  if (!S_ISREG(st.st_mode) && !(S_ISBLK(st.st_mode) && !no_follow))
    return fail(Errc::InvalidArgument, "publish_file '" + file.name + "': " + file.path +
                                           " is neither a regular file nor a block device");
  // Checked on the descriptor we keep: a path swapped after this check cannot change what we serve.
  if (!allow_other_writers)
    if (auto ok = check_writers(st, ::geteuid(), "publish_file '" + file.name + "': " + file.path); !ok)
      return ok;
  file.size = static_cast<std::uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode) && ::ioctl(file.fd.get(), BLKGETSIZE64, &file.size) != 0)
    return fail_errno("publish_file '" + file.name + "': the size of block device " + file.path, errno);
  if (file.size == 0)
    return fail(Errc::InvalidArgument, "publish_file '" + file.name + "': " + file.path + " is empty");
  file.device = static_cast<std::uint64_t>(st.st_dev);
  file.inode = static_cast<std::uint64_t>(st.st_ino);
  file.absolute_path = absolute_path_of(file.fd.get());
  if (file.writable && file.direct) {
    // The same file (reopened through our descriptor, so a path swapped since is not what we get), without
    // O_DIRECT: for a last block shorter than 4096, which O_DIRECT cannot write without growing the file.
    const std::string self = "/proc/self/fd/" + std::to_string(file.fd.get());
    file.buffered.reset(::open(self.c_str(), flags));
    if (!file.buffered) return fail_errno("publish_file '" + file.name + "': reopening " + file.path, errno);
  }
  return {};
}

}  // namespace rdmakit::xfer::detail
