// Watches the rdma_cm channels of a context's connections on one thread, so that a peer that closes or
// dies (its kernel sends a DREQ) moves our QP to the error state at once: pending receives and
// operations complete as Flushed instead of waiting for a timeout that a receive never has.
#pragma once

#include <memory>
#include <thread>

#include "rdmakit/error.hpp"

namespace rdmakit::verbs_impl {

class CmWatcher {
 public:
  virtual ~CmWatcher() = default;
  // The watched fd is readable. Called on the monitor's thread, never concurrently for one watcher.
  virtual void on_cm_readable() = 0;
};

class CmMonitor {
 public:
  static Result<std::shared_ptr<CmMonitor>> start();
  ~CmMonitor();
  CmMonitor(const CmMonitor&) = delete;
  CmMonitor& operator=(const CmMonitor&) = delete;

  void watch(int fd, std::weak_ptr<CmWatcher> watcher);
  // After unwatch() returns the fd is no longer polled (a call already running may still finish).
  void unwatch(int fd);

  struct State;

 private:
  explicit CmMonitor(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace rdmakit::verbs_impl
