#include "transport/shm/registry.hpp"

#include "core/identity.hpp"

namespace rdmakit::shm {
namespace {

constexpr std::uint32_t kGenerationMask = (1u << (32 - kSlotBits)) - 1;

std::uint32_t make_key(std::uint32_t generation, std::uint32_t slot) noexcept {
  return (generation << kSlotBits) | slot;
}

// Reads a slot whose key the caller has matched. The fields are stable while the key is: the owner
// revokes the key before it rewrites them and waits for pinned accesses first.
Status check_slot(const RegistrationSlot& slot, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                  Access needed, Status failure) noexcept {
  if (key == 0 || slot.key.load(std::memory_order_seq_cst) != key) return failure;
  auto access = static_cast<Access>(slot.access.load(std::memory_order_relaxed));
  if (!covers(slot.addr.load(std::memory_order_relaxed), slot.length.load(std::memory_order_relaxed), addr,
              length))
    return failure;
  if (!has(access, needed)) return failure;
  return Status::Success;
}

}  // namespace

Registry::Registry(ControlSegment* control)
    : control_(control), private_(std::make_unique<RegistrationSlot[]>(kSlots)), generation_(kSlots) {
  // Generations start at a random point, so keys of an earlier life of this process are unlikely to
  // be valid; descriptors' epochs catch the rest.
  auto start = static_cast<std::uint32_t>(identity::new_epoch());
  free_slots_.reserve(kSlots);
  for (std::uint32_t i = kSlots; i-- > 0;) {
    free_slots_.push_back(i);
    generation_[i] = (start + i) & kGenerationMask;
  }
}

Result<std::uint32_t> Registry::add(std::uint64_t addr, std::uint64_t length, Access access) {
  std::lock_guard lock(mutex_);
  if (free_slots_.empty())
    return fail(Errc::ResourceExhausted,
                "register_memory: all " + std::to_string(kSlots) + " shm registration slots are in use");
  std::uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  std::uint32_t key;
  do {
    generation_[slot] = (generation_[slot] + 1) & kGenerationMask;
    key = make_key(generation_[slot], slot);
  } while (generation_[slot] == 0 || key == kDeliveringPin);
  for (RegistrationSlot* s : {&private_[slot], &control_->slot[slot]}) {
    s->addr.store(addr, std::memory_order_relaxed);
    s->length.store(length, std::memory_order_relaxed);
    s->access.store(static_cast<std::uint32_t>(access), std::memory_order_relaxed);
    s->key.store(key, std::memory_order_release);
  }
  return key;
}

void Registry::revoke(std::uint32_t key) noexcept {
  // Shared first: initiators stop at once; then the private copy, which our own checks read.
  control_->slot[key & (kSlots - 1)].key.store(0, std::memory_order_seq_cst);
  private_[key & (kSlots - 1)].key.store(0, std::memory_order_seq_cst);
}

std::size_t Registry::size() const {
  std::lock_guard lock(mutex_);
  return kSlots - free_slots_.size();
}

void Registry::release(std::uint32_t key) {
  std::lock_guard lock(mutex_);
  free_slots_.push_back(key & (kSlots - 1));
}

Status Registry::check_local(const Segment& segment, bool write) const noexcept {
  const auto& slot = private_[segment.lkey & (kSlots - 1)];
  return check_slot(slot, segment.lkey, segment.addr, segment.length,
                    write ? Access::LocalWrite : Access::None, Status::LocalProtection);
}

Status Registry::check_own(std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                           Access needed) const noexcept {
  return check_slot(private_[key & (kSlots - 1)], key, addr, length, needed, Status::RemoteAccess);
}

Status check_remote(const ControlSegment& peer, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                    Access needed) noexcept {
  return check_slot(peer.slot[key & (kSlots - 1)], key, addr, length, needed, Status::RemoteAccess);
}

}  // namespace rdmakit::shm
