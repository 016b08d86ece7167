// A segment owner in a process of its own (tests/xfer/xfer_peer.cpp), for tests that stop or kill it.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

namespace rdmakit::xfer::testing {

class PeerProcess {
 public:
  PeerProcess(const std::filesystem::path& dir, const std::string& segment, std::size_t size,
              const std::string& transport)
      : PeerProcess(dir, segment, std::to_string(size), transport) {}
  // `what`: the segment's size in bytes, or "file:<path>" to publish that file as a file segment.
  PeerProcess(const std::filesystem::path& dir, const std::string& segment, const std::string& what,
              const std::string& transport) {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to_child[0], 0);
      ::dup2(from_child[1], 1);
      ::close(to_child[1]);
      ::close(from_child[0]);
      ::execl(RDMAKIT_XFER_PEER, RDMAKIT_XFER_PEER, dir.c_str(), segment.c_str(), what.c_str(),
              transport.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    char line[16] = {};
    ready_ = ::read(from_child[0], line, 6) == 6 && std::strncmp(line, "ready\n", 6) == 0;
    ::close(from_child[0]);
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  // Closing its stdin ends the owner; a stopped one is continued first so that it can see that.
  ~PeerProcess() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
    if (stdin_ >= 0) ::close(stdin_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  bool ready() const { return ready_; }
  // SIGSTOP returns before every thread has stopped (one thread takes the signal and then stops the others),
  // so a stop waits for the group stop: until then the owner's progress thread can still answer a request.
  void signal(int sig) const {
    ::kill(pid_, sig);
    int status = 0;
    if (sig == SIGSTOP) ::waitpid(pid_, &status, WUNTRACED);
  }
  // Waits until a killed owner is gone (its device resources with it).
  void reap() {
    if (pid_ > 0 && ::waitpid(pid_, nullptr, 0) == pid_) pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  bool ready_ = false;
};

}  // namespace rdmakit::xfer::testing
