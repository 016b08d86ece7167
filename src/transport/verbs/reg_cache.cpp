#include "transport/verbs/reg_cache.hpp"

#include <algorithm>

namespace rdmakit::verbs_impl {

const RegistrationCache::Entry* RegistrationCache::acquire(std::uint64_t addr, std::uint64_t length,
                                                           Access access) {
  std::lock_guard lock(mutex_);
  if (!stats_.enabled) return nullptr;
  const std::uint64_t end = addr + length;
  // Candidates start at or before addr; scanning backwards, none can cover once start + longest < end.
  for (auto it = by_start_.upper_bound(addr); it != by_start_.begin();) {
    --it;
    Entry& e = it->second;
    if (e.start + longest_ < end) break;
    if (e.shareable && e.access == access && e.start + e.length >= end) {
      ++e.refs;
      ++stats_.hits;
      return &e;
    }
  }
  ++stats_.misses;
  return nullptr;
}

const RegistrationCache::Entry* RegistrationCache::insert(std::uint64_t start, std::uint64_t length,
                                                          Access access, void* handle, std::uint32_t lkey,
                                                          std::uint32_t rkey, std::chrono::nanoseconds took) {
  std::lock_guard lock(mutex_);
  auto it = by_start_.emplace(start, Entry{start, length, access, handle, lkey, rkey, 1, stats_.enabled});
  longest_ = std::max(longest_, length);
  ++stats_.entries;
  ++stats_.registrations;
  stats_.pinned_bytes += length;
  stats_.registration_time += took;
  return &it->second;
}

void* RegistrationCache::release(const Entry* entry) {
  std::lock_guard lock(mutex_);
  auto [first, last] = by_start_.equal_range(entry->start);
  for (auto it = first; it != last; ++it) {
    if (&it->second != entry) continue;
    if (--it->second.refs > 0) return nullptr;
    void* handle = it->second.handle;
    --stats_.entries;
    ++stats_.deregistrations;
    stats_.pinned_bytes -= it->second.length;
    by_start_.erase(it);
    return handle;
  }
  return nullptr;  // not ours: nothing to do
}

CacheStats RegistrationCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace rdmakit::verbs_impl
