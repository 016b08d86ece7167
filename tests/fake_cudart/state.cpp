// The fake's state, failure injection, address look-ups and the double mapping of device memory.
#include "fake_cudart/state.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fake_cudart {

State& state() {
  static State* s = new State;  // never destroyed: exit handlers of the tests may still call in
  return *s;
}

int& current_device() {
  thread_local int device = 0;
  return device;
}

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

int injected(const char* function) {
  auto& failures = state().failures;
  auto it = failures.find(function);
  if (it == failures.end()) return kSuccess;
  if (it->second.skip-- > 0) return kSuccess;
  int error = it->second.error;
  failures.erase(it);
  return error;
}

Allocation* find_allocation(const void* p, std::size_t size, bool* overlaps) {
  if (overlaps) *overlaps = false;
  auto at = reinterpret_cast<std::uintptr_t>(p);
  auto& all = state().allocations;
  auto it = all.upper_bound(at);
  if (it == all.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  // A zero-sized allocation holds no address; one past the end is not inside.
  if (at < a.base || at >= a.base + a.size) return nullptr;
  if (size > a.base + a.size - at) {
    if (overlaps) *overlaps = true;
    return nullptr;
  }
  return &a;
}

HostRange* find_registered(const void* p, std::size_t size) {
  auto at = reinterpret_cast<std::uintptr_t>(p);
  auto& all = state().registered;
  auto it = all.upper_bound(at);
  if (it == all.begin()) return nullptr;
  --it;
  const HostRange& r = it->second;
  return at >= r.begin && at < r.end && size <= r.end - at ? &it->second : nullptr;
}

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kFixedAddresses = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kFixedAddresses = false;
#else
constexpr bool kFixedAddresses = true;
#endif
#else
constexpr bool kFixedAddresses = true;
#endif

// PROT_NONE address space at the next recognisable address not in use, else anywhere. Not under
// ThreadSanitizer: its mmap interceptor turns a hint outside its application ranges into address 0 but
// keeps MAP_FIXED_NOREPLACE, and the mapping lands at 0 (it then dies on it).
void* reserve_device_range(std::size_t mapped) {
  auto& s = state();
  for (int attempt = 0; kFixedAddresses && attempt < 16; ++attempt) {
    void* hint = reinterpret_cast<void*>(s.next_hint);
    void* p = ::mmap(hint, mapped, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    // A guard page between allocations: an overrun never lands in the next one.
    s.next_hint += mapped + page_size();
    if (p != MAP_FAILED) return p;
    if (errno != EEXIST) break;
    s.next_hint += std::uintptr_t{1} << 30;  // taken (a sanitizer's shadow, say): skip ahead
  }
  void* p = ::mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

int map_device(Allocation& a) {
  void* shadow = ::mmap(nullptr, a.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
  if (shadow == MAP_FAILED) return kMemoryAllocation;
  void* device = reserve_device_range(a.mapped);
  if (!device) {
    ::munmap(shadow, a.mapped);
    return kMemoryAllocation;
  }
  a.base = reinterpret_cast<std::uintptr_t>(device);
  a.shadow = static_cast<unsigned char*>(shadow);
  return kSuccess;
}

void unmap(Allocation& a) {
  if (a.kind == Kind::Managed) {  // one read-write mapping, at base
    ::munmap(a.shadow, a.mapped);
    return;
  }
  ::munmap(reinterpret_cast<void*>(a.base), a.mapped);
  ::munmap(a.shadow, a.mapped);
  ::close(a.fd);
}

void run_until(Stream& s, std::uint64_t position) {
  while (s.completed < position && !s.queued.empty()) {
    Copy c = s.queued.front();
    s.queued.pop_front();
    // Positions only ever point at earlier entries of the other stream, so waits cannot form a cycle.
    if (c.wait) run_until(*c.wait, c.until);
    if (c.size) std::memmove(c.dst, c.src, c.size);
    ++s.completed;
  }
}

void run_all() {
  for (Stream* s : state().streams) run_until(*s, s->enqueued);
}

}  // namespace fake_cudart
