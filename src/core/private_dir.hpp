// Directories only this uid may enter, for what must not be reachable by another user (shm listener
// sockets, the per-user secret). /tmp is shared: anyone can create /tmp/rdmakit-<uid> before us, so a
// name there is used only when it is ours and closed to others, and otherwise we fall back to a
// directory whose name nobody could have taken first.
#pragma once

#include <string>

#include "rdmakit/error.hpp"

namespace rdmakit::private_dir {

// `path` as a private directory of ours: created mode 0700 when missing; else it must be a real directory
// (not a symlink) owned by this uid with no permission for group or others. InvalidArgument naming the
// path when it is not.
Result<void> ensure(const std::string& path);

// Our directory in the temporary directory ($TMPDIR when absolute, else /tmp): <tmp>/rdmakit-<uid> when
// that is (or can be made) private and ours; when another uid holds that name, or made it open to
// others, <tmp>/rdmakit-<uid>-XXXXXX: the first such directory of ours (by name) that is private, else a
// fresh one (mkdtemp, 0700). Processes of this uid therefore agree on it, except two that race to make
// the first fallback directory at the same moment.
Result<std::string> in_tmp();

}  // namespace rdmakit::private_dir
