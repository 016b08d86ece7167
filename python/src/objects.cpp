// Lifetimes of the Python-side objects (objects.hpp) and the conversion of local/remote arguments.
#include "objects.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace rdmakit::python {
namespace {

[[noreturn]] void raise_closed(const char* what) {
  raise(Errc::InvalidArgument, std::string("the ") + what + " is closed");
}

void release_queue_through(auto& queue, std::uint64_t id) {
  while (!queue.empty() && queue.front().first <= id) queue.pop_front();
}

void add_segment(LocalSide& side, py::handle item) {
  if (py::isinstance<PySlice>(item)) {
    const auto& slice = item.cast<const PySlice&>();
    const auto& region = slice.region.cast<PyRegion&>().get();
    side.segments.push_back(region->slice(slice.offset, slice.length));
    side.regions.push_back(slice.region);
    return;
  }
  if (py::isinstance<PyRegion>(item)) {
    const auto& region = item.cast<PyRegion&>().get();
    auto whole = region->whole();  // a region of 4 GiB or more is not one segment: an error naming it
    if (!whole)
      raise(whole.error().code(), whole.error().message() + " (pass region[offset:offset + length])");
    side.segments.push_back(*whole);
    side.regions.push_back(py::reinterpret_borrow<py::object>(item));
    return;
  }
  raise(Errc::InvalidArgument, "the local side must be a Region, a Slice or a list of them, not a " +
                                   py::str(py::type::handle_of(item).attr("__name__")).cast<std::string>());
}

struct NativeRegistry {
  std::mutex mutex;
  // By control block: an object handed to the bindings twice is counted once.
  std::map<std::weak_ptr<const void>, const char*, std::owner_less<>> watched;
  std::size_t prune_at =
      64;  // expired entries are dropped when the map doubles: its size stays bounded by the live ones
  void prune() {
    std::erase_if(watched, [](const auto& entry) { return entry.first.expired(); });
    prune_at = std::max<std::size_t>(64, watched.size() * 2);
  }
};

NativeRegistry& native_registry() {
  static auto* registry = new NativeRegistry;  // never destroyed: objects may die after static teardown
  return *registry;
}

}  // namespace

void track_native(const char* kind, const std::shared_ptr<const void>& object) {
  auto& registry = native_registry();
  std::lock_guard lock(registry.mutex);
  if (registry.watched.size() >= registry.prune_at) registry.prune();
  registry.watched.try_emplace(object, kind);
}

std::map<std::string, std::size_t> live_native_objects() {
  auto& registry = native_registry();
  std::lock_guard lock(registry.mutex);
  registry.prune();
  std::map<std::string, std::size_t> counts;
  for (const char* kind :
       {"Context", "Connection", "MemoryRegion", "CompletionQueue", "Listener", "HeldBuffer"})
    counts[kind] = 0;
  for (const auto& [object, kind] : registry.watched) ++counts[kind];
  return counts;
}

const std::shared_ptr<Context>& PyContext::get() const {
  if (!context_) raise_closed("context");
  return context_;
}

const std::shared_ptr<MemoryRegion>& PyRegion::get() const {
  if (!region_) raise_closed("region");
  return region_;
}

void PyRegion::close() noexcept {
  region_.reset();  // deregistered (unless a view holds it): no transport touches the memory any more
  buffer_.reset();
  context_.reset();
}

void PinTable::pin(std::uint64_t id, std::vector<py::object> regions) {
  if (regions.empty()) return;
  (Connection::is_recv_id(id) ? recv_ : send_).emplace_back(id, std::move(regions));
}

void PinTable::release_through(std::uint64_t id) {
  release_queue_through(Connection::is_recv_id(id) ? recv_ : send_, id);
}

const std::shared_ptr<CompletionQueue>& PyCompletionQueue::get() const {
  if (!queue_) raise_closed("completion queue");
  return queue_;
}

void PyCompletionQueue::completed(const Completion& completion) {
  const auto found = pins_.find(completion.connection);
  if (found == pins_.end()) return;
  if (auto pins = found->second.lock()) {
    pins->release_through(completion.id);
  } else {
    pins_.erase(found);
  }
}

PyConnection::PyConnection(std::shared_ptr<Context> context, std::shared_ptr<Connection> connection,
                           py::object send, py::object recv)
    : send_cq(std::move(send)),
      recv_cq(std::move(recv)),
      context_(std::move(context)),
      connection_(std::move(connection)) {
  track_native("Connection", connection_);
  for (const auto& queue : {send_cq, recv_cq})
    if (!queue.is_none()) queue.cast<PyCompletionQueue&>().attach(connection_->number(), pins_);
}

const std::shared_ptr<Connection>& PyConnection::get() const {
  if (!connection_) raise_closed("connection");
  return connection_;
}

void PyConnection::close() noexcept {
  if (connection_) connection_->close();  // everything pending completes (flushed) before pins go
  connection_.reset();
  pins_->clear();
  context_.reset();
}

const std::shared_ptr<Listener>& PyListener::get() const {
  if (!listener_) raise_closed("listener");
  return listener_;
}

LocalSide local_side(py::handle local) {
  LocalSide side;
  if (py::isinstance<py::list>(local) || py::isinstance<py::tuple>(local)) {
    for (auto item : local) add_segment(side, item);
  } else {
    add_segment(side, local);
  }
  return side;
}

RemoteAddress remote_side(py::handle remote) {
  if (py::isinstance<RemoteAddress>(remote)) return remote.cast<RemoteAddress>();
  if (py::isinstance<RemoteRegion>(remote)) return remote.cast<const RemoteRegion&>().at(0);
  raise(Errc::InvalidArgument,
        "the remote side must be a RemoteRegion or a RemoteAddress (remote.at(offset))");
}

}  // namespace rdmakit::python
