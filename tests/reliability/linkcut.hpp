// The fault matrix's link cuts (tests/reliability/linkcut.cpp): the peer and this process in two network
// namespaces joined by a veth pair that the case makes, takes down and brings back up.
#pragma once

#include <string>

namespace rdmakit::faults {

// What a case returns when it cannot run here (no right to make namespaces), and the exit code ctest
// reports as skipped (SKIP_RETURN_CODE). With the environment variable CI set (CI sets CI=true and runs as
// root) a case that cannot run fails instead: a skip there would hide a broken set-up as a pass.
inline const std::string kSkipped = "SKIPPED";
inline constexpr int kSkipExit = 77;

// Down for a tenth of the tcp timeout, then up: every operation completes, in order, exactly once.
std::string linkcut_short(const std::string& transport);
// Down past the timeout: the operations fail within the bound; back up, a new connection works.
std::string linkcut_long(const std::string& transport);

}  // namespace rdmakit::faults
