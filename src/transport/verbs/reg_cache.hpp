// The registration cache's bookkeeping, as a plain data structure (the verbs calls live in the context):
// a registration of [start, start+length) with some rights is reused by a later request for a range it
// covers with exactly the same rights (never more: a broader rkey would grant the peer rights the caller
// did not ask for). Entries are reference-counted by the MemoryRegions that use them and dropped when the
// last one goes.
//
// Why freed memory is not a hazard here: an entry lives only while some MemoryRegion using it lives, and a
// MemoryRegion requires its memory to stay allocated (the core contract). So a hit is always on memory the
// caller still owns, mapped as it was when registered. Caches that keep registrations after the last user
// (UCX's rcache) must instead hook munmap/free to learn about freed-and-reused memory; we trade those
// extra hits for not needing hooks.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>

#include "rdmakit/memory.hpp"

namespace rdmakit::verbs_impl {

struct CacheStats {
  bool enabled = true;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t entries = 0;        // live registrations
  std::uint64_t pinned_bytes = 0;   // bytes they pin
  std::uint64_t registrations = 0;  // registrations made (ibv_reg_mr calls that succeeded)
  std::uint64_t deregistrations = 0;
  std::chrono::nanoseconds registration_time{};  // spent in ibv_reg_mr
};

class RegistrationCache {
 public:
  struct Entry {
    std::uint64_t start = 0;
    std::uint64_t length = 0;
    Access access = Access::None;
    void* handle = nullptr;  // the ibv_mr
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
    std::uint64_t refs = 0;
    bool shareable = true;
  };

  explicit RegistrationCache(bool enabled) noexcept { stats_.enabled = enabled; }

  // A live entry covering [addr, addr+length) with exactly `access`, its reference taken; nullptr on a
  // miss (or when the cache is off). Counts the hit or miss.
  const Entry* acquire(std::uint64_t addr, std::uint64_t length, Access access);
  // Records a new registration with one reference.
  const Entry* insert(std::uint64_t start, std::uint64_t length, Access access, void* handle,
                      std::uint32_t lkey, std::uint32_t rkey, std::chrono::nanoseconds took);
  // Drops a reference; returns the handle to deregister when it was the last, else nullptr.
  void* release(const Entry* entry);

  CacheStats stats() const;

 private:
  mutable std::mutex mutex_;
  std::multimap<std::uint64_t, Entry> by_start_;  // node-based: Entry pointers stay valid
  std::uint64_t longest_ = 0;                     // bounds the backwards scan of acquire()
  CacheStats stats_;
};

}  // namespace rdmakit::verbs_impl
