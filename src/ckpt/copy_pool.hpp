// Threads that split one large copy: started once with the engine, so a snapshot pays no thread creation.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rdmakit::ckpt::detail {

class CopyPool {
 public:
  // `threads` >= 1 counts the caller: threads - 1 workers are started.
  explicit CopyPool(unsigned threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }
  // Runs work(0) .. work(parts - 1) across the workers and the caller; returns when all are done.
  void run(std::size_t parts, const std::function<void(std::size_t)>& work);

 private:
  void worker_loop();
  bool take_part(std::size_t& part);  // mutex_ held

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  const std::function<void(std::size_t)>* work_ = nullptr;
  std::size_t parts_ = 0;
  std::size_t next_ = 0;
  std::size_t done_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::jthread> workers_;  // last: joined first
};

// One copy between the application's buffers and staging, split into `parts` byte ranges of the packed
// state. Pure arithmetic, unit-tested: part p copies the overlap of its range with each buffer.
struct Span {
  unsigned char* app;
  std::uint64_t offset;  // in staging
  std::uint64_t size;
};
// Copies the bytes [from, to) of the packed state between the spans and staging.
void copy_range(const std::vector<Span>& spans, unsigned char* staging, std::uint64_t from, std::uint64_t to,
                bool to_staging);
void copy_part(const std::vector<Span>& spans, unsigned char* staging, std::uint64_t total, std::size_t part,
               std::size_t parts, bool to_staging);

}  // namespace rdmakit::ckpt::detail
