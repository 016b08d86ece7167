// The in-process store: a map and a condition variable. For threads as ranks.
#include <condition_variable>
#include <map>
#include <mutex>

#include "rdmakit/bootstrap.hpp"

namespace rdmakit::bootstrap {
namespace {

class MemoryStore final : public Store {
 public:
  Result<void> set(std::string_view key, std::string_view value) override {
    {
      std::lock_guard lock(mutex_);
      if (!values_.emplace(std::string(key), std::string(value)).second)
        return fail(Errc::InvalidArgument, "store: key '" + std::string(key) +
                                               "' is already set (store keys are "
                                               "write-once)");
    }
    changed_.notify_all();
    return {};
  }

  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    auto it = values_.end();
    bool found = changed_.wait_for(lock, timeout, [&] {
      it = values_.find(std::string(key));
      return it != values_.end();
    });
    if (!found)
      return fail(Errc::Timeout, "store: key '" + std::string(key) + "' was not set within " +
                                     std::to_string(timeout.count()) + " ms");
    return it->second;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace rdmakit::bootstrap
