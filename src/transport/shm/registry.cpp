#include "transport/shm/registry.hpp"

#include <algorithm>
#include <iterator>

namespace rdmakit::shm {
namespace {

constexpr std::uint32_t kSlotMask = kSlots - 1;

// Reads a slot whose key the caller has matched. The fields are stable while the key is: the owner
// revokes the key before it rewrites them and waits for pinned accesses first.
Status check_fields(const RegistrationSlot& slot, std::uint64_t addr, std::uint64_t length, Access needed,
                    Status failure) noexcept {
  auto access = static_cast<Access>(slot.access.load(std::memory_order_relaxed));
  if (!covers(slot.addr.load(std::memory_order_relaxed), slot.length.load(std::memory_order_relaxed), addr,
              length))
    return failure;
  if (!has(access, needed)) return failure;
  return Status::Success;
}

Status check_slot(const RegistrationSlot& slot, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                  Access needed, Status failure) noexcept {
  if (key == 0 || slot.key.load(std::memory_order_seq_cst) != key) return failure;
  return check_fields(slot, addr, length, needed, failure);
}

}  // namespace

Registry::Registry(ControlSegment* control)
    : control_(control),
      private_(std::make_unique<RegistrationSlot[]>(kSlots)),
      lkeys_(std::make_unique<std::atomic<std::uint32_t>[]>(kSlots)),
      devices_(std::make_unique<DeviceRef[]>(kSlots)) {
  free_slots_.reserve(kSlots);
  for (std::uint32_t i = kSlots; i-- > 0;) free_slots_.push_back(i);
}

Result<Registry::Keys> Registry::add(std::uint64_t addr, std::uint64_t length, Access access,
                                     const DeviceRef* device) {
  std::lock_guard lock(mutex_);
  if (free_slots_.empty())
    return fail(Errc::ResourceExhausted,
                "register_memory: all " + std::to_string(kSlots) + " shm registration slots are in use");
  std::uint32_t slot = free_slots_.back();
  Keys keys{};
  for (std::uint32_t* key : {&keys.lkey, &keys.rkey}) {
    do {  // kDeliveringPin is an initiator's pin value, never a key
      auto drawn = keys_.next(kSlotMask, slot);
      if (!drawn) return std::unexpected(drawn.error());
      *key = *drawn;
    } while (*key == kDeliveringPin);
  }
  free_slots_.pop_back();
  // The device entries first: the key's release store below publishes them with the rest.
  devices_[slot] = device ? *device : DeviceRef{};
  DeviceRef shared = devices_[slot];
  if (!has(access, Access::RemoteRead) && !has(access, Access::RemoteWrite) &&
      !has(access, Access::RemoteAtomic)) {
    shared.flags &= ~kDeviceHandle;  // a local-only region: its handle stays private
    std::fill(std::begin(shared.handle), std::end(shared.handle), char{0});
  }
  control_->device[slot] = shared;
  for (RegistrationSlot* s : {&private_[slot], &control_->slot[slot]}) {
    s->addr.store(addr, std::memory_order_relaxed);
    s->length.store(length, std::memory_order_relaxed);
    s->access.store(static_cast<std::uint32_t>(access), std::memory_order_relaxed);
    s->key.store(keys.rkey, std::memory_order_release);
  }
  lkeys_[slot].store(keys.lkey, std::memory_order_release);
  return keys;
}

void Registry::revoke(std::uint32_t rkey) noexcept {
  // Shared first: initiators stop at once; then the private copy, which our own checks read.
  control_->slot[rkey & kSlotMask].key.store(0, std::memory_order_seq_cst);
  private_[rkey & kSlotMask].key.store(0, std::memory_order_seq_cst);
  lkeys_[rkey & kSlotMask].store(0, std::memory_order_seq_cst);
}

std::size_t Registry::size() const {
  std::lock_guard lock(mutex_);
  return kSlots - free_slots_.size();
}

void Registry::release(std::uint32_t rkey) {
  std::lock_guard lock(mutex_);
  free_slots_.push_back(rkey & kSlotMask);
}

Status Registry::check_local(const Segment& segment, bool write, const DeviceRef** device) const noexcept {
  std::uint32_t slot = segment.lkey & kSlotMask;
  if (segment.lkey == 0 || lkeys_[slot].load(std::memory_order_seq_cst) != segment.lkey)
    return Status::LocalProtection;
  if (device) *device = devices_[slot].flags & kDeviceMemory ? &devices_[slot] : nullptr;
  return check_fields(private_[slot], segment.addr, segment.length, write ? Access::LocalWrite : Access::None,
                      Status::LocalProtection);
}

bool Registry::is_device(std::uint32_t key) const noexcept {
  return (devices_[key & kSlotMask].flags & kDeviceMemory) != 0;
}

Status Registry::check_own(std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                           Access needed) const noexcept {
  return check_slot(private_[key & kSlotMask], key, addr, length, needed, Status::RemoteAccess);
}

Status check_remote(const ControlSegment& peer, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                    Access needed) noexcept {
  return check_slot(peer.slot[key & kSlotMask], key, addr, length, needed, Status::RemoteAccess);
}

}  // namespace rdmakit::shm
