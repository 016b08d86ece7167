// The fake's test controls (fake_cudart.hpp).
#include "fake_cudart/state.hpp"

using namespace fake_cudart;

extern "C" {

void fake_cudart_reset(int devices) {
  std::lock_guard lock(state().mutex);
  const FakeCudartStats& old = state().stats;
  // What is alive stays alive, and so do its counters: only the owners can release it.
  state().stats = FakeCudartStats{.devices = devices,
                                  .streams_alive = old.streams_alive,
                                  .streams_blocking = old.streams_blocking,
                                  .registered_ranges = old.registered_ranges,
                                  .device_allocations = old.device_allocations,
                                  .ipc_open_alive = old.ipc_open_alive,
                                  .events_alive = old.events_alive};
  state().failures.clear();
  state().dmabuf_supported = true;
}

void fake_cudart_stats(FakeCudartStats* out) {
  std::lock_guard lock(state().mutex);
  *out = state().stats;
}

void fake_cudart_fail(const char* function, int skip, int error) {
  std::lock_guard lock(state().mutex);
  state().failures[function] = Injected{skip, error};
}

void* fake_cudart_host_view(const void* device_pointer) {
  std::lock_guard lock(state().mutex);
  const Allocation* a = find_allocation(device_pointer, 0);
  return a ? shadow_of(*a, device_pointer) : nullptr;
}

void fake_cudart_set_dmabuf_supported(int supported) {
  std::lock_guard lock(state().mutex);
  state().dmabuf_supported = supported != 0;
}

}  // extern "C"
