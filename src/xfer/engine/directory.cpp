// Engine::publish_directory: a directory of shard files published as file segments `prefix/<name>`, all or
// nothing. The directory is opened once and every file is opened relative to it without following a
// symbolic link (publish_file_at), so an entry swapped for a link between the listing and the open is
// refused, never followed out of the directory.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "core/fd.hpp"
#include "xfer/engine/engine_impl.hpp"
#include "xfer/engine/files.hpp"

namespace rdmakit::xfer::detail {

namespace {

bool has_control(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// `text` with control characters as \xNN, so an error message shows a bad name without carrying it.
std::string shown(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[u >> 4];
    out += kHex[u & 15];
  }
  return out;
}

// The names publish_directory publishes, sorted: regular, non-empty files not starting with '.'; a name
// with a control character is an error (a shard that cannot be published must not vanish silently).
Result<std::vector<std::string>> list_files(int dir, const std::string& path) {
  Fd listing(::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!listing) return fail_errno("publish_directory: listing " + path, errno);
  DIR* stream = ::fdopendir(listing.get());
  if (!stream) return fail_errno("publish_directory: listing " + path, errno);
  listing.release();  // the stream owns it now
  std::vector<std::string> names;
  Result<void> bad{};
  while (const dirent* e = ::readdir(stream)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size == 0)
      continue;
    if (has_control(name) && bad) {
      bad = fail(Errc::InvalidArgument,
                 "publish_directory: " + path + "/" + shown(name) + ": a file name with a control character");
    }
    names.push_back(std::move(name));
  }
  ::closedir(stream);
  if (!bad) return std::unexpected(bad.error());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Result<std::vector<std::string>> EngineImpl::publish_directory(std::string_view prefix,
                                                               const std::string& dir,
                                                               const FileSegmentOptions& options) {
  if (prefix.empty() || has_control(prefix))
    return fail(
        Errc::InvalidArgument,
        "publish_directory: the prefix is empty or has a control character ('" + shown(prefix) + "')");
  Fd directory(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory) return fail_errno("publish_directory: opening " + dir, errno);
  auto files = list_files(directory.get(), dir);
  if (!files) return std::unexpected(files.error());
  if (files->empty())
    return fail(Errc::InvalidArgument, "publish_directory: " + dir + " holds no regular, non-empty file");
  std::vector<std::string> names;
  for (const auto& file : *files) {
    auto name = std::string(prefix) + "/" + file;
    if (name.size() > kMaxFileSegmentName)
      return fail(Errc::InvalidArgument, "publish_directory: " + dir + "/" + file + ": segment name '" +
                                             name + "' is longer than " +
                                             std::to_string(kMaxFileSegmentName) + " bytes");
    names.push_back(std::move(name));
  }
  for (std::size_t i = 0; i < files->size(); ++i) {
    auto published =
        publish_file_at(directory.get(), (*files)[i], true, names[i], dir + "/" + (*files)[i], options);
    if (published) continue;
    for (std::size_t j = 0; j < i; ++j) (void)unpublish(names[j]);
    return std::unexpected(Error(published.error().code(),
                                 "publish_directory " + dir + ": " + published.error().message() +
                                     " (nothing of the directory stays published)",
                                 published.error().sys_errno()));
  }
  return names;
}

}  // namespace rdmakit::xfer::detail
