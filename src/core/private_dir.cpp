#include "core/private_dir.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/log.hpp"

namespace rdmakit::private_dir {
namespace {

std::string tmp_root() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && tmp[0] == '/' ? std::string(tmp) : std::string("/tmp");
}

// Whether `path` (not followed if a symlink) is a directory of ours closed to group and others.
bool is_private(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
         (st.st_mode & 077) == 0;
}

// The fallback directories of ours already there, by name.
std::vector<std::string> existing_fallbacks(const std::string& root, const std::string& prefix) {
  std::vector<std::string> found;
  DIR* listing = ::opendir(root.c_str());
  if (!listing) return found;
  while (dirent* entry = ::readdir(listing)) {
    std::string_view name = entry->d_name;
    if (name.size() == prefix.size() + 6 && name.starts_with(prefix) &&
        is_private(root + "/" + std::string(name)))
      found.push_back(root + "/" + std::string(name));
  }
  ::closedir(listing);
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

Result<void> ensure(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return fail_errno("mkdir " + path, errno);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fail_errno("lstat " + path, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return fail(Errc::InvalidArgument,
                path + " is not a private directory of ours (a real directory, owned by uid " +
                    std::to_string(::geteuid()) + ", mode 0700)");
  return {};
}

Result<std::string> in_tmp() {
  std::string root = tmp_root();
  std::string usual = root + "/rdmakit-" + std::to_string(::geteuid());
  auto ok = ensure(usual);
  if (ok) return usual;
  if (ok.error().code() != Errc::InvalidArgument) return std::unexpected(ok.error());
  // Taken: a name of ours that nobody could have made first. An existing one keeps every process of
  // this uid (and the per-user secret in it) in one place.
  std::string prefix = "rdmakit-" + std::to_string(::geteuid()) + "-";
  auto found = existing_fallbacks(root, prefix);
  if (found.empty()) {
    std::string pattern = root + "/" + prefix + "XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) return fail_errno("mkdtemp " + pattern, errno);
    found = existing_fallbacks(root, prefix);  // a process that raced us may have made one first by name
    if (found.empty()) return fail(Errc::SystemError, pattern + " vanished after mkdtemp");
    if (found.front() != pattern) ::rmdir(pattern.c_str());
  }
  static std::atomic<bool> warned{false};  // once per process: every shm listen() passes here
  if (!warned.exchange(true))
    log::warn("core", usual +
                          " is not a private directory of ours (another user may have created it): using " +
                          found.front() + " instead");
  return found.front();
}

}  // namespace rdmakit::private_dir
