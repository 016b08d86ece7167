// The fake runtime's copies, streams and events. Copies are checked as the runtime checks them (a device
// range inside one allocation, a kind that agrees with the addresses) and run on the fake's shadow
// mappings. On a stream they only queue: cudaStreamSynchronize, cudaEventSynchronize (up to the event)
// and the implicit synchronizations run them, so code that forgets to wait reads stale bytes.
#include <cstring>

#include "fake_cudart/state.hpp"

using namespace fake_cudart;

namespace {

enum MemcpyKind { kHostToHost = 0, kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3, kDefault = 4 };

enum class Side { Host, Device, Bad };

struct Resolved {
  Side side;
  Allocation* allocation;
};

// Where [p, p + size) lies: inside one device allocation, in host memory, or across a device
// allocation's edge (an error).
Resolved resolve(const void* p, std::size_t size) {
  bool overlaps = false;
  if (Allocation* a = find_allocation(p, size, &overlaps)) return {Side::Device, a};
  if (overlaps) return {Side::Bad, nullptr};
  auto begin = reinterpret_cast<std::uintptr_t>(p);
  auto it = state().allocations.upper_bound(begin);
  if (it != state().allocations.end() && size > it->first - begin) return {Side::Bad, nullptr};
  return {Side::Host, nullptr};
}

// Managed memory is accessible from both sides, as with the runtime's unified addressing.
bool acceptable(const Resolved& r, bool want_device) {
  if (r.side == Side::Bad) return false;
  if (r.side == Side::Device && r.allocation->kind == Kind::Managed) return true;
  return (r.side == Side::Device) == want_device;
}

struct Checked {
  Copy copy;
  bool d2d;
  bool unpinned;
};

int check_copy(void* dst, const void* src, std::size_t size, int kind, Checked* out) {
  if (kind < kHostToHost || kind > kDefault) return kInvalidMemcpyDirection;
  *out = Checked{{dst, src, 0}, false, false};
  if (size == 0) return kSuccess;
  if (!dst || !src) return kInvalidValue;
  Resolved d = resolve(dst, size), s = resolve(src, size);
  if (kind != kDefault) {
    bool dst_device = kind == kHostToDevice || kind == kDeviceToDevice;
    bool src_device = kind == kDeviceToHost || kind == kDeviceToDevice;
    if (!acceptable(d, dst_device) || !acceptable(s, src_device)) return kInvalidValue;
  } else if (d.side == Side::Bad || s.side == Side::Bad) {
    return kInvalidValue;
  }
  auto translate = [](const Resolved& r, const void* p) -> unsigned char* {
    return r.side == Side::Device ? shadow_of(*r.allocation, p)
                                  : static_cast<unsigned char*>(const_cast<void*>(p));
  };
  auto unpinned = [size](const Resolved& r, const void* p) {
    return r.side == Side::Host && !find_registered(p, size);
  };
  *out = Checked{{translate(d, dst), translate(s, src), size},
                 d.side == Side::Device && s.side == Side::Device,
                 unpinned(d, dst) || unpinned(s, src)};
  return kSuccess;
}

void run(const Copy& c) {
  if (c.size) std::memmove(c.dst, c.src, c.size);
}

// What the legacy default stream waits for before its own work: every blocking stream's queue.
void run_blocking_streams() {
  for (Stream* s : state().streams)
    if (s->blocking) run_until(*s, s->enqueued);
}

Stream* find_stream(void* stream) {
  auto* s = static_cast<Stream*>(stream);
  return state().streams.count(s) ? s : nullptr;
}

Event* find_event(void* event) {
  auto* e = static_cast<Event*>(event);
  return state().events.count(e) ? e : nullptr;
}

}  // namespace

extern "C" {

int cudaMemcpy(void* dst, const void* src, std::size_t size, int kind) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Checked c;
  if (int e = check_copy(dst, src, size, kind, &c)) return e;
  run_blocking_streams();  // cudaMemcpy runs on the legacy default stream
  run(c.copy);
  ++state().stats.sync_copies;
  if (c.d2d) ++state().stats.d2d_copies;
  return kSuccess;
}

int cudaMemcpyAsync(void* dst, const void* src, std::size_t size, int kind, void* stream) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Stream* s = find_stream(stream);
  if (stream && !s) return kInvalidResourceHandle;
  Checked c;
  if (int e = check_copy(dst, src, size, kind, &c)) return e;
  auto& stats = state().stats;
  ++stats.copies;
  if (c.unpinned) ++stats.copies_unpinned;
  if (c.d2d) ++stats.d2d_copies;
  if (!s) {  // the legacy default stream: the fake runs it at once
    ++stats.copies_default_stream;
    run_blocking_streams();
    run(c.copy);
    return kSuccess;
  }
  s->queued.push_back(c.copy);
  ++s->enqueued;
  return kSuccess;
}

int cudaStreamCreateWithFlags(void** stream, unsigned flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  if (!stream || flags > 1) return kInvalidValue;  // cudaStreamDefault 0, cudaStreamNonBlocking 1
  bool blocking = !(flags & 1);
  auto* s = new Stream{.device = current_device(), .blocking = blocking};
  state().streams.insert(s);
  ++state().stats.streams_alive;
  if (blocking) ++state().stats.streams_blocking;
  *stream = s;
  return kSuccess;
}

int cudaStreamCreate(void** stream) { return cudaStreamCreateWithFlags(stream, 0); }

int cudaStreamDestroy(void* stream) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Stream* s = find_stream(stream);
  if (!s) return kInvalidResourceHandle;
  for (const Copy& c : s->queued)
    if (!c.wait) ++state().stats.copies_dropped;
  for (Event* e : state().events)
    if (e->stream == s) e->stream = nullptr;  // its copies will never run: the event counts as passed
  for (Stream* other : state().streams)
    for (Copy& c : other->queued)
      if (c.wait == s) c.wait = nullptr;
  state().streams.erase(s);
  if (s->blocking) --state().stats.streams_blocking;
  delete s;
  --state().stats.streams_alive;
  return kSuccess;
}

int cudaStreamSynchronize(void* stream) {
  std::lock_guard lock(state().mutex);
  Stream* s = find_stream(stream);
  if (stream && !s) return kInvalidResourceHandle;
  if (int e = injected(__func__)) {  // an asynchronous error: the queued copies did not happen
    if (s) {
      s->queued.clear();
      s->completed = s->enqueued;
    }
    return e;
  }
  if (s)
    run_until(*s, s->enqueued);
  else
    run_blocking_streams();
  return kSuccess;
}

// Runs nothing: cudaErrorNotReady while copies are queued.
int cudaStreamQuery(void* stream) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Stream* s = find_stream(stream);
  if (stream && !s) return kInvalidResourceHandle;
  if (s) return s->queued.empty() ? kSuccess : kNotReady;
  for (Stream* other : state().streams)
    if (other->blocking && !other->queued.empty()) return kNotReady;
  return kSuccess;
}

int cudaDeviceSynchronize() {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  run_all();
  return kSuccess;
}

int cudaEventCreateWithFlags(void** event, unsigned flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  // BlockingSync 1, DisableTiming 2, Interprocess 4 (which requires DisableTiming).
  if (!event || flags > 7 || ((flags & 4) && !(flags & 2))) return kInvalidValue;
  auto* e = new Event;
  state().events.insert(e);
  ++state().stats.events_alive;
  *event = e;
  return kSuccess;
}

int cudaEventCreate(void** event) { return cudaEventCreateWithFlags(event, 0); }

int cudaEventDestroy(void* event) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Event* e = find_event(event);
  if (!e) return kInvalidResourceHandle;
  state().events.erase(e);
  delete e;
  --state().stats.events_alive;
  return kSuccess;
}

// Remembers the stream and how many copies were queued on it: the event passes when they have run.
// On the legacy default stream (null) everything already ran, so the event has passed.
int cudaEventRecord(void* event, void* stream) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Event* e = find_event(event);
  Stream* s = find_stream(stream);
  if (!e || (stream && !s)) return kInvalidResourceHandle;
  if (!s) run_blocking_streams();
  e->stream = s;
  e->position = s ? s->enqueued : 0;
  return kSuccess;
}

// Later work on `stream` waits for the event: a queue entry that runs the event's stream up to it.
int cudaStreamWaitEvent(void* stream, void* event, unsigned flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Event* e = find_event(event);
  Stream* s = find_stream(stream);
  if (!e || (stream && !s)) return kInvalidResourceHandle;
  if (flags > 1) return kInvalidValue;  // cudaEventWaitDefault 0, cudaEventWaitExternal 1
  if (!e->stream) return kSuccess;      // passed already
  if (!s) {                             // the legacy default stream runs its work at once
    run_until(*e->stream, e->position);
    return kSuccess;
  }
  if (e->stream == s) return kSuccess;
  s->queued.push_back(
      Copy{.dst = nullptr, .src = nullptr, .size = 0, .wait = e->stream, .until = e->position});
  ++s->enqueued;
  return kSuccess;
}

int cudaEventSynchronize(void* event) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Event* e = find_event(event);
  if (!e) return kInvalidResourceHandle;
  if (e->stream) run_until(*e->stream, e->position);
  return kSuccess;
}

int cudaEventQuery(void* event) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  Event* e = find_event(event);
  if (!e) return kInvalidResourceHandle;
  return !e->stream || e->stream->completed >= e->position ? kSuccess : kNotReady;
}

}  // extern "C"
