// Metadata servers for the tests: the builtin one in this process, and real redis-server and etcd
// processes on free loopback ports of their own, with their data in a temporary directory. Every process
// is killed when its guard goes (a failed assertion included) and, through PR_SET_PDEATHSIG, when the
// test program itself dies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdmakit/xfer/metadata.hpp"

namespace rdmakit::xfer::testing {

// A child process: killed (SIGKILL) and reaped when the guard goes.
class Process {
 public:
  // Starts argv[0] with the rest as arguments; stdout and stderr go to `log` (appended), or with
  // `capture_stdout`, stdout comes back through read_line().
  static Process spawn(const std::vector<std::string>& argv, const std::string& log,
                       bool capture_stdout = false);
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  ~Process();
  void kill_now();  // SIGKILL and reap
  pid_t pid() const noexcept { return pid_; }
  // One line of the child's stdout within `timeout` (nullopt: none came).
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);

 private:
  Process(pid_t pid, int out) : pid_(pid), out_(out) {}
  pid_t pid_ = -1;
  int out_ = -1;
  std::string pending_;
};

// A temporary directory, removed with its contents.
class TempDir {
 public:
  // Under `base` (default: the system's temporary directory).
  explicit TempDir(const std::string& base = {});
  ~TempDir();
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// A free loopback TCP port (bound and released: a small race, harmless on a test machine).
std::uint16_t free_port();

// One metadata server under test. stop() kills it (its data is lost); start() brings a fresh one up on
// the same port and waits until it answers.
class Server {
 public:
  virtual ~Server() = default;
  virtual std::string url() const = 0;
  virtual void stop() = 0;
  virtual void start() = 0;
};

// nullopt with `why` set when the backend's server program is not installed.
std::unique_ptr<Server> make_server(const std::string& backend, std::string& why);

// Options short enough for tests: a 1 s ttl renewed every 200 ms, a 2 s timeout.
MetadataOptions test_options(const std::string& backend, const std::string& name_space = "test");

}  // namespace rdmakit::xfer::testing
