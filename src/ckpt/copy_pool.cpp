#include "ckpt/copy_pool.hpp"

#include <algorithm>
#include <cstring>

namespace rdmakit::ckpt::detail {

CopyPool::CopyPool(unsigned threads) {
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  workers_.clear();  // joins
}

bool CopyPool::take_part(std::size_t& part) {
  if (!work_ || next_ >= parts_) return false;
  part = next_++;
  return true;
}

void CopyPool::run(std::size_t parts, const std::function<void(std::size_t)>& work) {
  std::unique_lock lock(mutex_);
  work_ = &work;
  parts_ = parts;
  next_ = 0;
  done_ = 0;
  ++generation_;
  wake_.notify_all();
  for (std::size_t part; take_part(part);) {
    lock.unlock();
    work(part);
    lock.lock();
    ++done_;
  }
  finished_.wait(lock, [&] { return done_ == parts_; });
  work_ = nullptr;
}

void CopyPool::worker_loop() {
  std::uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    for (std::size_t part; take_part(part);) {
      auto* work = work_;
      lock.unlock();
      (*work)(part);
      lock.lock();
      if (++done_ == parts_) finished_.notify_all();
    }
  }
}

void copy_part(const std::vector<Span>& spans, unsigned char* staging, std::uint64_t total, std::size_t part,
               std::size_t parts, bool to_staging) {
  // Part boundaries on 4 KiB multiples, so no two threads write the same cache line or page.
  auto boundary = [&](std::size_t p) {
    std::uint64_t raw = total / parts * p;
    return p == parts ? total : std::min<std::uint64_t>(total, raw / 4096 * 4096);
  };
  copy_range(spans, staging, boundary(part), boundary(part + 1), to_staging);
}

void copy_range(const std::vector<Span>& spans, unsigned char* staging, std::uint64_t begin,
                std::uint64_t end, bool to_staging) {
  for (const auto& span : spans) {
    std::uint64_t from = std::max(begin, span.offset), to = std::min(end, span.offset + span.size);
    if (from >= to) continue;
    unsigned char* app = span.app + (from - span.offset);
    if (to_staging)
      std::memcpy(staging + from, app, to - from);
    else
      std::memcpy(app, staging + from, to - from);
  }
}

}  // namespace rdmakit::ckpt::detail
