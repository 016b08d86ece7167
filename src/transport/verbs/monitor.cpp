#include "transport/verbs/monitor.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace rdmakit::verbs_impl {

// Shared by the monitor and its thread: the thread may outlive the monitor by one handler call (when
// that handler dropped the last reference to the context, and so destroyed the monitor on its own thread).
struct CmMonitor::State {
  int epoll = -1;
  int wake = -1;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::unordered_map<int, std::weak_ptr<CmWatcher>> watchers;
  ~State() {
    if (epoll >= 0) ::close(epoll);
    if (wake >= 0) ::close(wake);
  }
};

namespace {

void run(const std::shared_ptr<CmMonitor::State>& state) {
  std::vector<epoll_event> events(16);
  while (!state->stop.load()) {
    int n = epoll_wait(state->epoll, events.data(), static_cast<int>(events.size()), 1000);
    for (int i = 0; i < n && !state->stop.load(); ++i) {
      std::shared_ptr<CmWatcher> watcher;
      {
        std::lock_guard lock(state->mutex);
        auto it = state->watchers.find(events[i].data.fd);
        if (it != state->watchers.end()) watcher = it->second.lock();
      }
      if (watcher) watcher->on_cm_readable();
    }
  }
}

}  // namespace

Result<std::shared_ptr<CmMonitor>> CmMonitor::start() {
  auto state = std::make_shared<State>();
  state->epoll = epoll_create1(EPOLL_CLOEXEC);
  if (state->epoll < 0) return fail_errno("epoll_create1", errno);
  state->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->wake < 0) return fail_errno("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = state->wake;
  if (epoll_ctl(state->epoll, EPOLL_CTL_ADD, state->wake, &ev) != 0) return fail_errno("epoll_ctl", errno);
  return std::shared_ptr<CmMonitor>(new CmMonitor(std::move(state)));
}

CmMonitor::CmMonitor(std::shared_ptr<State> state) : state_(std::move(state)) {
  thread_ = std::thread([state = state_] { run(state); });
}

CmMonitor::~CmMonitor() {
  state_->stop.store(true);
  std::uint64_t one = 1;
  (void)!::write(state_->wake, &one, sizeof(one));
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // destroyed from a handler: the loop sees `stop` and returns, holding its own State
  else
    thread_.join();
}

void CmMonitor::watch(int fd, std::weak_ptr<CmWatcher> watcher) {
  std::lock_guard lock(state_->mutex);
  state_->watchers[fd] = std::move(watcher);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(state_->epoll, EPOLL_CTL_ADD, fd, &ev);
}

void CmMonitor::unwatch(int fd) {
  std::lock_guard lock(state_->mutex);
  epoll_ctl(state_->epoll, EPOLL_CTL_DEL, fd, nullptr);
  state_->watchers.erase(fd);
}

}  // namespace rdmakit::verbs_impl
