#include "core/registration_table.hpp"

#include <thread>

#include "core/identity.hpp"

namespace rdmakit {

// Keys start at a random point so that a key from an earlier life of the process is unlikely to be valid;
// the owner epoch in descriptors catches the rest.
RegistrationTable::RegistrationTable()
    : next_key_(static_cast<std::uint32_t>(identity::new_epoch()) | 1u) {}

std::uint32_t RegistrationTable::add(std::uint64_t addr, std::uint64_t length, Access access) {
  std::unique_lock lock(mutex_);
  std::uint32_t key;
  do {
    key = next_key_++;
  } while (key == 0 || entries_.contains(key));
  auto entry = std::make_unique<Entry>();
  entry->addr = addr;
  entry->length = length;
  entry->access = access;
  entry->key = key;
  entries_.emplace(key, std::move(entry));
  return key;
}

void RegistrationTable::remove(std::uint32_t key) {
  std::unique_ptr<Entry> entry;
  {
    std::unique_lock lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    entry = std::move(it->second);
    entries_.erase(it);
  }
  // New lookups can no longer find it; wait for accesses already under way. Each ends in bounded time:
  // its bytes arrive or its connection fails.
  while (entry->pins.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

const RegistrationTable::Entry* RegistrationTable::find_covering(std::uint32_t key, std::uint64_t addr,
                                                                 std::uint64_t length) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const Entry& e = *it->second;
  // Written to avoid overflow of addr + length on hostile input.
  if (addr < e.addr || addr - e.addr > e.length || length > e.length - (addr - e.addr)) return nullptr;
  return &e;
}

Status RegistrationTable::check_remote(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length,
                                       Access needed, Pin* pin) const {
  std::shared_lock lock(mutex_);
  const Entry* entry = find_covering(rkey, addr, length);
  if (!entry || !has(entry->access, needed)) return Status::RemoteAccess;
  auto* mutable_entry = const_cast<Entry*>(entry);
  mutable_entry->pins.fetch_add(1, std::memory_order_acquire);
  *pin = Pin(mutable_entry);
  return Status::Success;
}

Status RegistrationTable::check_local(const Segment& segment, bool write) const {
  std::shared_lock lock(mutex_);
  const Entry* entry = find_covering(segment.lkey, segment.addr, segment.length);
  if (!entry || (write && !has(entry->access, Access::LocalWrite))) return Status::LocalProtection;
  return Status::Success;
}

}  // namespace rdmakit
