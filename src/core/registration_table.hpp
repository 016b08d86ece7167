// The registered regions of a context, for the software transports: keys, bounds and rights are checked
// here before a byte is touched, and a region being accessed by a peer is pinned so that deregistration
// waits for the access to end instead of letting it write into freed memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "core/key_source.hpp"
#include "rdmakit/completion.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit {

class RegistrationTable {
 public:
  struct Entry {
    std::uint64_t addr;
    std::uint64_t length;
    Access access;
    std::uint32_t lkey;
    std::uint32_t rkey;
    bool device = false;  // CUDA device memory: the transport copies through host memory (staged path)
    std::atomic<int> pins{0};
  };

  // Keeps an entry from being removed while alive. Empty when a check failed.
  class Pin {
   public:
    Pin() = default;
    explicit Pin(Entry* entry) noexcept : entry_(entry) {}
    Pin(Pin&& other) noexcept : entry_(std::exchange(other.entry_, nullptr)) {}
    Pin& operator=(Pin&& other) noexcept {
      if (this != &other) {
        release();
        entry_ = std::exchange(other.entry_, nullptr);
      }
      return *this;
    }
    ~Pin() { release(); }
    explicit operator bool() const noexcept { return entry_ != nullptr; }
    // The pinned region is device memory: the CPU must not touch it (core/staged_copy.hpp moves its bytes).
    bool device() const noexcept { return entry_ && entry_->device; }

   private:
    void release() noexcept {
      if (entry_) entry_->pins.fetch_sub(1, std::memory_order_release);
      entry_ = nullptr;
    }
    Entry* entry_ = nullptr;
  };

  struct Keys {
    std::uint32_t lkey;
    std::uint32_t rkey;
  };

  // Registers [addr, addr+length) under two random keys that differ, neither ever issued before in this
  // table's life (KeySource): an rkey a peer holds says nothing about another region's keys, and an
  // lkey is never valid as an rkey.
  Result<Keys> add(std::uint64_t addr, std::uint64_t length, Access access, bool device = false);
  // Removes the region of this lkey; waits until no access pins it. Pins are held only by accesses that
  // progress or fail within the transport's timeout_ms, which bounds the wait (see the .cpp).
  void remove(std::uint32_t key);

  // A remote peer's access: key known, [addr, addr+length) inside the region, `needed` granted.
  // Success: *pin holds the region until the access ends. Otherwise the status to report
  // (RemoteAccess for all three failures, as verbs reports them).
  Status check_remote(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length, Access needed,
                      Pin* pin) const;
  // A local segment: key known and the segment inside the region; `write` needs LocalWrite.
  // `device` (optional): set to whether the segment is in device memory.
  Status check_local(const Segment& segment, bool write, bool* device = nullptr) const;
  // Regions registered now.
  std::size_t size() const;

 private:
  template <typename Map>
  static const Entry* find_covering(const Map& map, std::uint32_t key, std::uint64_t addr,
                                    std::uint64_t length);

  mutable std::shared_mutex mutex_;
  std::unordered_map<std::uint32_t, std::unique_ptr<Entry>> entries_;  // by lkey
  std::unordered_map<std::uint32_t, Entry*> by_rkey_;
  KeySource keys_;
};

}  // namespace rdmakit
