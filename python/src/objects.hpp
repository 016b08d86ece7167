// The Python-side objects and who keeps whom alive:
//   PyRegion      -> its Context (shared_ptr) and the registered Python object (HeldBuffer)
//   PyConnection  -> its Context, its completion queues, and every region used by an operation that has
//                    not completed yet (PinTable), so dropping a region or array early cannot free memory
//                    a transport still writes into
//   PyListener, PyCompletionQueue -> their Context
// A Python object may die in any order: each holds what it needs. close() releases early, once.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "buffer.hpp"
#include "common.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::python {

// A debug count of the native objects the bindings were handed (contexts, connections, regions, queues,
// listeners, held Python buffers), each watched through a weak_ptr: _rdmakit._live_objects() reports how
// many of each kind are still alive, wherever the last reference is (a leak test expects them all to die).
void track_native(const char* kind, const std::shared_ptr<const void>& object);
std::map<std::string, std::size_t> live_native_objects();

// ConnectionStats as a dict: the core's fields, and the transport's own counters by name under
// "transport_counters" (Connection.stats(), Context.diagnostics()).
pybind11::dict stats_dict(const ConnectionStats& stats);

class PyContext {
 public:
  explicit PyContext(std::shared_ptr<Context> context) : context_(std::move(context)) {
    track_native("Context", context_);
  }
  // The context, or rdmakit.Error(InvalidArgument) once closed.
  const std::shared_ptr<Context>& get() const;
  // Drops this handle; the context itself lives on while regions, connections or listeners use it.
  void close() noexcept { context_.reset(); }
  bool closed() const noexcept { return !context_; }

 private:
  std::shared_ptr<Context> context_;
};

class PyRegion {
 public:
  // Registered memory of a Python object (`buffer`), or memory rdmakit allocated (no buffer).
  PyRegion(std::shared_ptr<Context> context, std::shared_ptr<MemoryRegion> region,
           std::shared_ptr<HeldBuffer> buffer)
      : context_(std::move(context)), buffer_(std::move(buffer)), region_(std::move(region)) {
    track_native("MemoryRegion", region_);
    if (buffer_) track_native("HeldBuffer", buffer_);
  }
  ~PyRegion() { close(); }
  PyRegion(const PyRegion&) = delete;
  PyRegion& operator=(const PyRegion&) = delete;
  const std::shared_ptr<MemoryRegion>& get() const;
  py::object owner() const { return buffer_ ? buffer_->owner() : py::none(); }
  const std::shared_ptr<HeldBuffer>& buffer() const { return buffer_; }
  // Deregisters first (the transport stops using the memory), then gives the buffer back.
  void close() noexcept;
  bool closed() const noexcept { return !region_; }

 private:
  std::shared_ptr<Context> context_;
  std::shared_ptr<HeldBuffer> buffer_;
  std::shared_ptr<MemoryRegion> region_;
};

// The bytes of a region as a buffer-protocol object (Region.view()): keeps the registration and the
// registered object's buffer, so a view outlives Region.close() safely (the memory goes with the last view).
struct RegionMemory {
  std::shared_ptr<HeldBuffer> buffer;
  std::shared_ptr<MemoryRegion> region;
};

// Bytes [offset, offset + length) of a region; keeps the region object alive.
struct PySlice {
  py::object region;  // a PyRegion
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
};

// Regions pinned by operations not yet known to be complete, per queue, in posting order. RC completes in
// order, so the completion of id N (or the flush on close) releases every pin up to N.
class PinTable {
 public:
  void pin(std::uint64_t id, std::vector<py::object> regions);
  void release_through(std::uint64_t id);
  void clear() { send_.clear(), recv_.clear(); }

 private:
  using Queue = std::deque<std::pair<std::uint64_t, std::vector<py::object>>>;
  Queue send_;
  Queue recv_;
};

class PyCompletionQueue {
 public:
  PyCompletionQueue(std::shared_ptr<Context> context, std::shared_ptr<CompletionQueue> queue)
      : context_(std::move(context)), queue_(std::move(queue)) {
    track_native("CompletionQueue", queue_);
  }
  const std::shared_ptr<CompletionQueue>& get() const;
  void attach(std::uint32_t connection, const std::shared_ptr<PinTable>& pins) { pins_[connection] = pins; }
  // Releases the pins of completed operations (GIL held).
  void completed(const Completion& completion);
  void close() noexcept { queue_.reset(); }

 private:
  std::shared_ptr<Context> context_;
  std::shared_ptr<CompletionQueue> queue_;
  std::map<std::uint32_t, std::weak_ptr<PinTable>> pins_;
};

class PyConnection {
 public:
  PyConnection(std::shared_ptr<Context> context, std::shared_ptr<Connection> connection, py::object send_cq,
               py::object recv_cq);
  ~PyConnection() { close(); }
  PyConnection(const PyConnection&) = delete;
  PyConnection& operator=(const PyConnection&) = delete;
  const std::shared_ptr<Connection>& get() const;
  PinTable& pins() { return *pins_; }
  // Flushes what is pending, then lets go of the pinned regions.
  void close() noexcept;

  py::object send_cq;  // PyCompletionQueue or None (the connection's own queue)
  py::object recv_cq;

 private:
  std::shared_ptr<Context> context_;
  std::shared_ptr<PinTable> pins_ = std::make_shared<PinTable>();
  std::shared_ptr<Connection> connection_;
};

class PyListener {
 public:
  PyListener(std::shared_ptr<Context> context, std::shared_ptr<Listener> listener)
      : context_(std::move(context)), listener_(std::move(listener)) {
    track_native("Listener", listener_);
  }
  const std::shared_ptr<Listener>& get() const;
  const std::shared_ptr<Context>& context() const { return context_; }
  void close() noexcept { listener_.reset(); }

 private:
  std::shared_ptr<Context> context_;
  std::shared_ptr<Listener> listener_;
};

// Turns what Python passes as the local side of an operation (a Region, a Slice, or a list of them) into
// a scatter-gather list, and records the region objects to pin.
struct LocalSide {
  std::vector<Segment> segments;
  std::vector<py::object> regions;
};
LocalSide local_side(py::handle local);
RemoteAddress remote_side(py::handle remote);

}  // namespace rdmakit::python
