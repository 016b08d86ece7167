// A part of a test run as another uid (a "stranger"): the test program runs itself again through
// `setpriv --reuid=65534 --regid=65534 --clear-groups`, with RDMAKIT_TEST_STRANGER naming the part. A test
// file lists its parts in a static initializer, `const int kParts = stranger::parts({{"name", fn}})`, which
// runs the named part before main() in the child and exits with its status; nothing of gtest runs there.
// Needs root (to switch uid) and setpriv: a test skips without them, never silently under CI=1.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

namespace rdmakit::testing::stranger {

constexpr const char* kVariable = "RDMAKIT_TEST_STRANGER";
constexpr const char* kNobody = "65534";

// In a child started by run(): runs its part and exits. Returns 0 in the test program itself.
inline int parts(const std::map<std::string, std::function<int()>>& table) {
  const char* name = std::getenv(kVariable);
  if (!name) return 0;
  ::alarm(30);  // no watchdog runs before main(): a part that hangs is killed
  auto it = table.find(name);
  std::fflush(stdout);
  int status = it == table.end() ? 126 : it->second();
  std::fflush(stdout);
  ::_exit(status);
}

inline std::string self_path() {
  std::error_code ignored;
  return std::filesystem::read_symlink("/proc/self/exe", ignored).string();
}

// Why a stranger cannot be run here, or "" when it can. A program path that uid 65534 cannot reach is a
// failure, not a reason to skip.
inline std::string unavailable() {
  if (::geteuid() != 0) return "switching to uid 65534 needs root";
  if (::access("/usr/bin/setpriv", X_OK) != 0) return "setpriv (util-linux) is not installed";
  for (std::filesystem::path p = self_path(); p != p.root_path(); p = p.parent_path()) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    EXPECT_TRUE(st.st_mode & S_IXOTH) << p << " is not reachable by uid 65534";
  }
  return "";
}

struct Outcome {
  int status = -1;  // the exit status; -1 when it did not exit normally
  std::string output;
};

// Runs part `name` in a child, as uid 65534 when `as_stranger` (else as us: the control case), with `env`
// added and RDMAKIT_JOB_SECRET removed unless `env` sets it; returns its status and standard output.
inline Outcome run(const std::string& name, const std::map<std::string, std::string>& env = {},
                   bool as_stranger = true) {
  int out[2];
  if (::pipe(out) != 0) return {};
  std::string self = self_path();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    ::unsetenv("RDMAKIT_JOB_SECRET");
    ::setenv(kVariable, name.c_str(), 1);
    for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
    if (as_stranger)
      ::execl("/usr/bin/setpriv", "setpriv", "--reuid", kNobody, "--regid", kNobody, "--clear-groups",
              self.c_str(), static_cast<char*>(nullptr));
    else
      ::execl(self.c_str(), self.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  Outcome outcome;
  char buffer[4096];
  for (;;) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 40000) <= 0) {  // the child's alarm fires first; this is the last resort
      ::kill(pid, SIGKILL);
      break;
    }
    ssize_t n = ::read(out[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    outcome.output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

}  // namespace rdmakit::testing::stranger
