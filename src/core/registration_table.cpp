#include "core/registration_table.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "core/log.hpp"

namespace rdmakit {
namespace {

// Longer than any timeout a transport would use by default (tcp: timeout_ms, 4 s).
constexpr std::chrono::seconds kPinWarning{30};

}  // namespace

// Keys are random and never reused within the table's life (KeySource); a key from an earlier life of the
// process may match by chance (1 in 2^32), and the owner epoch in descriptors catches that.
Result<RegistrationTable::Keys> RegistrationTable::add(std::uint64_t addr, std::uint64_t length,
                                                       Access access, bool device) {
  std::unique_lock lock(mutex_);
  auto lkey = keys_.next();
  if (!lkey) return std::unexpected(lkey.error());
  auto rkey = keys_.next();  // differs from lkey: the source never issues a key twice
  if (!rkey) return std::unexpected(rkey.error());
  auto entry = std::make_unique<Entry>();
  entry->addr = addr;
  entry->length = length;
  entry->access = access;
  entry->device = device;
  entry->lkey = *lkey;
  entry->rkey = *rkey;
  by_rkey_.emplace(*rkey, entry.get());
  entries_.emplace(*lkey, std::move(entry));
  return Keys{*lkey, *rkey};
}

std::size_t RegistrationTable::size() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

void RegistrationTable::remove(std::uint32_t key) {
  std::unique_ptr<Entry> entry;
  {
    std::unique_lock lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    entry = std::move(it->second);
    entries_.erase(it);
    by_rkey_.erase(entry->rkey);
  }
  // New lookups can no longer find it; wait for accesses already under way. Returning earlier would let a
  // peer write into memory the owner is about to free, so the bound comes from the holders instead: every
  // pin belongs to an access that makes progress or fails its connection within the transport's timeout_ms
  // (tcp: a frame stalled half way, or responses the peer does not read; the failure releases the pins).
  // A wait far beyond that is a bug in a transport: say so, once.
  auto start = std::chrono::steady_clock::now();
  bool reported = false;
  auto pause = std::chrono::microseconds(20);
  while (entry->pins.load(std::memory_order_acquire) != 0) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    if (!reported && std::chrono::steady_clock::now() - start > kPinWarning) {
      reported = true;
      log::warn("core", "deregistration of key " + std::to_string(key) + " has waited " +
                            std::to_string(kPinWarning.count()) + " s for " +
                            std::to_string(entry->pins.load()) + " peer accesses to end");
    }
  }
}

template <typename Map>
const RegistrationTable::Entry* RegistrationTable::find_covering(const Map& map, std::uint32_t key,
                                                                 std::uint64_t addr, std::uint64_t length) {
  auto it = map.find(key);
  if (it == map.end()) return nullptr;
  const Entry& e = *it->second;
  // Written to avoid overflow of addr + length on hostile input.
  if (addr < e.addr || addr - e.addr > e.length || length > e.length - (addr - e.addr)) return nullptr;
  return &e;
}

Status RegistrationTable::check_remote(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length,
                                       Access needed, Pin* pin) const {
  std::shared_lock lock(mutex_);
  const Entry* entry = find_covering(by_rkey_, rkey, addr, length);
  if (!entry || !has(entry->access, needed)) return Status::RemoteAccess;
  auto* mutable_entry = const_cast<Entry*>(entry);
  mutable_entry->pins.fetch_add(1, std::memory_order_acquire);
  *pin = Pin(mutable_entry);
  return Status::Success;
}

Status RegistrationTable::check_local(const Segment& segment, bool write, bool* device) const {
  std::shared_lock lock(mutex_);
  const Entry* entry = find_covering(entries_, segment.lkey, segment.addr, segment.length);
  if (!entry || (write && !has(entry->access, Access::LocalWrite))) return Status::LocalProtection;
  if (device) *device = entry->device;
  return Status::Success;
}

}  // namespace rdmakit
