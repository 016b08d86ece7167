// Bindings of the transfer engine (rdmakit::xfer::Engine): segments, local memory and batches.
//
// Who keeps whom alive: every Python object of an engine (the engine, its segments, batches and the arrays
// over allocated segments) holds the EngineCore. The core holds the engine, the metadata store it uses, the
// Python buffers it was given (registered or published) and the buffers of batches still in flight. It
// stops the engine first (its threads end, requests still in flight fail) and only then gives the buffers
// back, so no memory a transport or a peer may still touch returns to Python early. close() unpublishes
// this engine's names and drops the handle.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <set>
#include <string>

#include "buffer.hpp"
#include "rdmakit/xfer/engine.hpp"
#include "xfer.hpp"

namespace rdmakit::python {
namespace {

using namespace std::chrono;

// Memory the engine holds for Python: a Python buffer registered for requests, published under names, or
// both; or memory of allocate_segment(), which the engine itself owns (its registration frees it) and which
// must outlive every array over it (`arrays`), whatever was unpublished or unregistered meanwhile.
struct HeldMemory {
  std::shared_ptr<HeldBuffer> buffer;  // null for allocated memory
  std::size_t size = 0;
  bool local = false;
  std::set<std::string> published;
  bool arrays = false;  // allocated memory that a numpy array (its _SegmentMemory base) still refers to
};

// A submitted batch and the buffers its requests read or write.
struct InFlight {
  std::shared_ptr<xfer::Batch> batch;
  std::vector<std::shared_ptr<HeldBuffer>> buffers;
};

struct EngineCore {
  std::shared_ptr<xfer::MetadataStore> metadata;
  std::map<std::uintptr_t, HeldMemory> memory;  // by address
  std::vector<InFlight> inflight;
  std::unique_ptr<xfer::Engine> engine;

  EngineCore() = default;
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;
  ~EngineCore() {
    without_gil([&] { engine.reset(); });
    inflight.clear();  // GIL held: the buffers go back to Python
    memory.clear();
    without_gil([&] { metadata.reset(); });
  }
  // Lets go of the buffers of batches that finished.
  void prune() {
    std::erase_if(inflight, [](const InFlight& f) { return f.batch->done(); });
  }
};

using Core = std::shared_ptr<EngineCore>;

class PyXferEngine {
 public:
  explicit PyXferEngine(Core core) : core_(std::move(core)) {}
  const Core& get() const {
    if (!core_) raise(Errc::InvalidArgument, "the xfer engine is closed");
    return core_;
  }
  xfer::Engine& engine() const { return *get()->engine; }
  bool closed() const noexcept { return !core_; }
  // Unpublishes what this engine published (peers see the names go), then drops the handle.
  void close();

 private:
  Core core_;
};

struct PySegment {
  Core core;
  std::uint32_t handle = 0;
  std::string name;

  xfer::SegmentInfo info() const { return unwrap(core->engine->segment_info(xfer::SegmentHandle{handle})); }
};

// The base of the numpy array allocate_segment() returns (numpy gives every view of it the same base): while
// any array over the segment lives, its memory stays allocated and registered, even once unpublished, and
// so its address cannot be handed to another allocation. Defined below (its destructor drops the memory).
class SegmentMemory;

struct PyBatch {
  Core core;
  std::shared_ptr<xfer::Batch> batch;
};

void PyXferEngine::close() {
  if (!core_) return;
  std::vector<std::string> names;
  for (const auto& [address, held] : core_->memory)
    names.insert(names.end(), held.published.begin(), held.published.end());
  {
    py::gil_scoped_release unlocked;
    for (const auto& name : names) (void)core_->engine->unpublish(name);
  }
  for (auto& [address, held] : core_->memory) held.published.clear();
  core_.reset();
}

std::uintptr_t address_of(const HeldBuffer& buffer) {
  return reinterpret_cast<std::uintptr_t>(buffer.data());
}

template <typename Call>
auto unlocked(Call call) {
  py::gil_scoped_release released;
  return call();
}

std::string type_name(py::handle value) {
  return py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>();
}

xfer::EngineOptions engine_options(const py::kwargs& kwargs) {
  xfer::EngineOptions options;
  // {name, setter}: the Python keyword and the EngineOptions field it sets.
  using Setter = void (*)(xfer::EngineOptions&, py::handle);
  static const std::pair<const char*, Setter> kFields[] = {
      {"name", [](auto& o, py::handle v) { o.name = v.cast<std::string>(); }},
      {"transports", [](auto& o, py::handle v) { o.transports = v.cast<std::vector<std::string>>(); }},
      {"verbs_devices", [](auto& o, py::handle v) { o.verbs_devices = v.cast<std::vector<std::string>>(); }},
      {"listen_address", [](auto& o, py::handle v) { o.listen_address = v.cast<std::string>(); }},
      {"transport", [](auto& o, py::handle v) { o.transport = v.cast<std::string>(); }},
      {"connections_per_rail",
       [](auto& o, py::handle v) { o.connections_per_rail = v.cast<std::uint32_t>(); }},
      {"stripe_bytes", [](auto& o, py::handle v) { o.stripe_bytes = v.cast<std::uint64_t>(); }},
      {"coalesce_bytes", [](auto& o, py::handle v) { o.coalesce_bytes = v.cast<std::uint64_t>(); }},
      {"max_inflight_per_peer",
       [](auto& o, py::handle v) { o.max_inflight_per_peer = v.cast<std::uint32_t>(); }},
      {"max_inflight_per_rail",
       [](auto& o, py::handle v) { o.max_inflight_per_rail = v.cast<std::uint32_t>(); }},
      {"max_retries", [](auto& o, py::handle v) { o.max_retries = v.cast<std::uint32_t>(); }},
      {"peer_timeout",
       [](auto& o, py::handle v) { o.peer_timeout = positive_ms(v.cast<double>(), "peer_timeout"); }},
      {"connect_timeout",
       [](auto& o, py::handle v) { o.connect_timeout = positive_ms(v.cast<double>(), "connect_timeout"); }},
      {"submit_timeout",
       [](auto& o, py::handle v) { o.submit_timeout = positive_ms(v.cast<double>(), "submit_timeout"); }},
      {"max_notifications", [](auto& o, py::handle v) { o.max_notifications = v.cast<std::uint32_t>(); }},
      {"file_local_reads", [](auto& o, py::handle v) { o.file_local_reads = v.cast<bool>(); }},
  };
  for (auto [key, value] : kwargs) {
    const auto name = key.cast<std::string>();
    const auto* field =
        std::find_if(std::begin(kFields), std::end(kFields), [&](const auto& f) { return name == f.first; });
    if (field == std::end(kFields)) raise(Errc::InvalidArgument, "unknown xfer Engine option '" + name + "'");
    try {
      field->second(options, value);
    } catch (const py::cast_error&) {
      raise(Errc::InvalidArgument,
            "xfer Engine option '" + name + "' has the wrong type (" + type_name(value) + ")");
    }
  }
  return options;
}

Core make_core(const PyMetadata& metadata, const py::kwargs& kwargs) {
  auto core = std::make_shared<EngineCore>();
  core->metadata = metadata.get();
  const auto options = engine_options(kwargs);
  auto engine = unlocked([&] { return xfer::Engine::create(*core->metadata, options); });
  core->engine = unwrap(std::move(engine));
  return core;
}

// Python memory for the engine: the existing hold at its address, or a new one.
HeldMemory& hold(EngineCore& core, const std::shared_ptr<HeldBuffer>& buffer) {
  auto [it, added] = core.memory.try_emplace(address_of(*buffer), HeldMemory{buffer, buffer->size()});
  return it->second;
}

// Gives memory back to the engine's registrations and to Python once neither a name, register_local() nor
// an array over allocated memory keeps it (batches in flight hold their own buffers). For allocated memory
// the engine's registration is the owner: unregistering frees it.
void drop_if_unused(EngineCore& core, std::uintptr_t address) {
  auto it = core.memory.find(address);
  if (it == core.memory.end() || it->second.local || !it->second.published.empty() || it->second.arrays)
    return;
  (void)unlocked([&] { return core.engine->unregister_local(reinterpret_cast<void*>(address)); });
  core.memory.erase(address);  // by key: another Python thread may have changed the map meanwhile
}

class SegmentMemory {
 public:
  SegmentMemory(Core core, std::span<std::byte> bytes) : core_(std::move(core)), bytes_(bytes) {}
  SegmentMemory(const SegmentMemory&) = delete;
  SegmentMemory& operator=(const SegmentMemory&) = delete;
  // Runs when the last array over the segment goes (Python deallocates it with the GIL held).
  ~SegmentMemory() {
    const auto address = reinterpret_cast<std::uintptr_t>(bytes_.data());
    auto it = core_->memory.find(address);
    if (it == core_->memory.end()) return;
    it->second.arrays = false;
    drop_if_unused(*core_, address);
  }

 private:
  Core core_;
  std::span<std::byte> bytes_;
};

void publish(PyXferEngine& self, const std::string& name, py::handle object) {
  const auto& core = self.get();
  auto buffer = std::make_shared<HeldBuffer>(object, true, Placement::HostOrDevice);  // peers WRITE into it
  unwrap(
      unlocked([&] { return core->engine->publish(name, buffer->data(), buffer->size(), buffer->kind()); }));
  hold(*core, buffer).published.insert(name);
}

void unpublish(PyXferEngine& self, const std::string& name) {
  const auto& core = self.get();
  unwrap(unlocked([&] { return core->engine->unpublish(name); }));
  for (auto& [address, held] : core->memory) {
    if (held.published.erase(name) != 0) return drop_if_unused(*core, address);
  }
}

void register_local(PyXferEngine& self, py::handle object) {
  const auto& core = self.get();
  auto buffer = std::make_shared<HeldBuffer>(object, true, Placement::HostOrDevice);  // READs land in it
  auto known = core->memory.find(address_of(*buffer));
  const bool same = known != core->memory.end() && known->second.size == buffer->size();
  if (same && known->second.local)
    raise(Errc::InvalidArgument, "register_local: this memory is registered already");
  if (!same)
    unwrap(unlocked(
        [&] { return core->engine->register_local(buffer->data(), buffer->size(), buffer->kind()); }));
  hold(*core, buffer).local = true;  // a published buffer of the same bytes is registered already
}

void unregister_local(PyXferEngine& self, py::handle object) {
  const auto& core = self.get();
  const auto address = address_of(HeldBuffer(object, false, Placement::HostOrDevice));
  auto it = core->memory.find(address);
  if (it == core->memory.end() || !it->second.local)
    raise(Errc::NotFound, "unregister_local: this memory was not registered with register_local()");
  it->second.local = false;
  drop_if_unused(*core, address);
}

// ready=False: allocated and registered, but not in the metadata until publish_ready(name).
py::array allocate_segment(PyXferEngine& self, const std::string& name, py::handle size_arg, bool ready) {
  const auto size = int_arg<std::size_t>(size_arg, "size");
  const auto& core = self.get();
  auto bytes = unwrap(unlocked([&] {
    return ready ? core->engine->allocate_segment(name, size)
                 : core->engine->allocate_unpublished(name, size);
  }));
  // New memory: no entry can be at its address (memory held for Python is not the allocator's to give).
  auto& held = core->memory[reinterpret_cast<std::uintptr_t>(bytes.data())];
  held.size = bytes.size();
  held.published.insert(name);
  held.arrays = true;
  auto owner = py::cast(std::make_unique<SegmentMemory>(core, bytes));
  return py::array(py::dtype::of<std::uint8_t>(), {static_cast<py::ssize_t>(bytes.size())}, {1}, bytes.data(),
                   owner);
}

xfer::Op op_of(py::handle value) {
  if (py::isinstance<py::str>(value)) {
    const auto text = value.cast<std::string>();
    if (text == "read" || text == "READ") return xfer::Op::Read;
    if (text == "write" || text == "WRITE") return xfer::Op::Write;
    raise(Errc::InvalidArgument, "op '" + text + "' is neither READ nor WRITE");
  }
  return value.cast<xfer::Op>();  // a cast_error names the field below
}

Error for_request(std::size_t i, const Error& error) {
  return Error(error.code(), "request " + std::to_string(i) + ": " + error.message(), error.sys_errno(),
               error.status());
}

// Whether [data, data + size) lies in memory of allocate_segment().
bool inside_allocated(const EngineCore& core, const void* data, std::size_t size) {
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  auto it = core.memory.upper_bound(address);
  if (it == core.memory.begin()) return false;
  --it;
  return !it->second.buffer && address + size <= it->first + it->second.size;
}

// (op, local, segment, offset[, length]) -> a Request whose local memory `keep` holds. Every problem is
// rdmakit.InvalidArgumentError naming the request and the field.
xfer::Request parse_request(const EngineCore& core, py::handle item, std::size_t i,
                            std::vector<std::shared_ptr<HeldBuffer>>& keep) {
  static const char* const kFields[] = {"op", "local", "segment", "offset", "length"};
  static const char* const kExpected[] = {"rdmakit.xfer.READ or WRITE", "a buffer", "an rdmakit.xfer.Segment",
                                          "an int >= 0", "an int >= 0 or None"};
  if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) || py::len(item) < 4 ||
      py::len(item) > 5)
    raise(Errc::InvalidArgument,
          "request " + std::to_string(i) + ": expected (op, local, segment, offset[, length])");
  const auto fields = py::reinterpret_borrow<py::sequence>(item);
  xfer::Request request;
  std::size_t at = 0;  // the field being read, for the message
  try {
    request.op = op_of(fields[at]);
    at = 2;
    const auto& segment = fields[at].cast<const PySegment&>();
    if (segment.core.get() != &core)
      raise(Errc::InvalidArgument, "segment '" + segment.name + "' was opened by another engine");
    request.segment = xfer::SegmentHandle{segment.handle};
    request.offset = fields[at = 3].cast<std::uint64_t>();
    at = 1;
    keep.push_back(
        std::make_shared<HeldBuffer>(fields[at], request.op == xfer::Op::Read, Placement::HostOrDevice));
    request.local = keep.back()->data();
    at = 4;
    const auto size = keep.back()->size();
    request.length = py::len(fields) == 5 && !fields[at].is_none() ? fields[at].cast<std::uint64_t>() : size;
    if (request.length > size)
      raise(Errc::InvalidArgument, "length " + std::to_string(request.length) +
                                       " exceeds the local buffer (" + std::to_string(size) + " bytes)");
    // In allocated memory, the engine's own work requests keep the allocation until they complete; holding
    // the array here too would close a cycle (array -> its memory -> engine -> batch -> array) that only the
    // next submit() broke, so a dropped engine with an unwaited batch never stopped.
    if (inside_allocated(core, request.local, size)) keep.pop_back();
  } catch (const py::cast_error&) {
    raise(Errc::InvalidArgument, "request " + std::to_string(i) + ": " + kFields[at] + " " +
                                     py::repr(fields[at]).cast<std::string>() + " (" + type_name(fields[at]) +
                                     ") is not " + kExpected[at]);
  } catch (const RaisedError& raised) {
    raise(for_request(i, raised.error));
  }
  return request;
}

// A request list prepared once (Engine.prepare): holds the buffers its requests use for as long as it lives.
struct PyPrepared {
  Core core;
  std::shared_ptr<const xfer::PreparedBatch> prepared;
  std::vector<std::shared_ptr<HeldBuffer>> buffers;
};

std::vector<xfer::Request> parse_requests(const EngineCore& core, const py::sequence& items,
                                          std::vector<std::shared_ptr<HeldBuffer>>& keep) {
  std::vector<xfer::Request> requests;
  for (std::size_t i = 0; i < py::len(items); ++i) requests.push_back(parse_request(core, items[i], i, keep));
  if (requests.empty()) raise(Errc::InvalidArgument, "submit: the batch is empty");
  return requests;
}

// A list of requests, or a PreparedRequests (then `notify` is refused: prepare a list per message instead).
PyBatch submit(PyXferEngine& self, py::handle items, std::optional<py::bytes> notify, bool block) {
  const auto& core = self.get();
  core->prune();
  InFlight inflight;
  if (py::isinstance<PyPrepared>(items)) {
    const auto& prepared = items.cast<const PyPrepared&>();
    if (prepared.core.get() != core.get()) raise(Errc::InvalidArgument, "submit: prepared by another engine");
    if (notify) raise(Errc::InvalidArgument, "submit: a prepared list takes no notification");
    inflight.buffers = prepared.buffers;
    inflight.batch = unwrap(unlocked([&] {
      return block ? core->engine->submit(*prepared.prepared) : core->engine->try_submit(*prepared.prepared);
    }));
  } else {
    auto requests = parse_requests(*core, items.cast<py::sequence>(), inflight.buffers);
    std::string message = notify ? std::string(*notify) : std::string();
    inflight.batch = unwrap(unlocked([&] {
      if (notify) return core->engine->submit(requests, std::as_bytes(std::span(message)));
      return block ? core->engine->submit(requests) : core->engine->try_submit(requests);
    }));
  }
  core->inflight.push_back(inflight);
  return PyBatch{core, inflight.batch};
}

PyPrepared prepare(PyXferEngine& self, const py::sequence& items) {
  const auto& core = self.get();
  PyPrepared prepared{core, nullptr, {}};
  auto requests = parse_requests(*core, items, prepared.buffers);
  prepared.prepared = unwrap(unlocked([&] { return core->engine->prepare(requests); }));
  return prepared;
}

py::object notification_tuple(const std::optional<xfer::Notification>& n) {
  if (!n) return py::none();
  return py::make_tuple(n->sender, n->segment,
                        py::bytes(reinterpret_cast<const char*>(n->message.data()), n->message.size()));
}

py::list results(const PyBatch& self) {
  if (!self.batch->done()) raise(Errc::InvalidArgument, "the batch is still in flight: wait() for it first");
  py::list out;
  for (std::size_t i = 0; i < self.batch->size(); ++i) {
    const auto status = self.batch->status(i);
    if (status && *status)
      out.append(py::none());
    else
      out.append(exception_for(for_request(i, status->error())));
  }
  return out;
}

// Raises one exception for every failed request of a finished batch: the class of the first failure, a
// message that names each failed request with its code, status and reason, and `failures`, a dict from the
// request's index to its rdmakit.Error. Returns when none failed.
void raise_failures(const xfer::Batch& batch) {
  std::vector<std::pair<std::size_t, Error>> failed;
  for (std::size_t i = 0; i < batch.size(); ++i)
    if (const auto status = batch.status(i); status && !*status) failed.emplace_back(i, status->error());
  if (failed.empty()) return;
  std::string message =
      std::to_string(failed.size()) + " of " + std::to_string(batch.size()) + " requests failed:";
  py::dict failures;
  for (const auto& [i, error] : failed) {
    // The completion status where one is behind the failure (an operation that failed at the peer).
    const auto status = error.status() == Status::Success
                            ? std::string()
                            : ", status " + std::string(to_string(error.status()));
    message += "\n  request " + std::to_string(i) + ": " + error.message() + " (" +
               std::string(to_string(error.code())) + status + ")";
    failures[py::int_(i)] = exception_for(for_request(i, error));
  }
  const auto& first = failed.front().second;
  auto exception = exception_for(Error(first.code(), message, first.sys_errno(), first.status()));
  exception.attr("failures") = failures;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  throw py::error_already_set();
}

py::list wait(PyBatch& self, std::optional<double> timeout, bool check) {
  const auto batch = self.batch;
  unwrap(
      wait_in_slices(to_timeout(timeout, kForever), [&](nanoseconds slice) { return batch->wait(slice); }));
  if (check && batch->failed() != 0) raise_failures(*batch);
  return results(self);
}

py::dict stats_dict(const xfer::EngineStats& s) {
  py::dict d;
  d["requests"] = s.requests, d["work_requests"] = s.work_requests, d["coalesced"] = s.coalesced;
  d["retries"] = s.retries, d["resolves"] = s.resolves,
  d["peak_inflight_per_peer"] = s.peak_inflight_per_peer;
  py::list rails;
  for (const auto& rail : s.rails) {
    py::dict r;
    r["transport"] = rail.transport, r["device"] = rail.device, r["work_requests"] = rail.work_requests;
    rails.append(r);
  }
  d["rails"] = rails;
  d["notifications_received"] = s.notifications_received;
  d["notifications_dropped"] = s.notifications_dropped, d["notifications_refused"] = s.notifications_refused;
  return d;
}

void bind_segment(py::module_& m) {
  py::class_<SegmentMemory>(m, "_SegmentMemory",
                            "The base of allocated segments' arrays: keeps the memory and the engine alive.");
  py::class_<PySegment>(m, "Segment",
                        "A segment opened by name (Engine.open_segment): the target of requests.")
      .def_readonly("name", &PySegment::name, "The segment's name.")
      .def_readonly("handle", &PySegment::handle, "The engine's handle (never 0).")
      .def_property_readonly(
          "length", [](const PySegment& s) { return s.info().length; }, "Bytes of the segment.")
      .def_property_readonly(
          "owner", [](const PySegment& s) { return s.info().owner; }, "Name of the engine that published it.")
      .def_property_readonly(
          "transport", [](const PySegment& s) { return s.info().transport; },
          "The transport chosen to reach it.")
      .def_property_readonly(
          "read_locally", [](const PySegment& s) { return s.info().read_locally; },
          "A file segment on this host whose file this process reads itself (Engine(file_local_reads=...)).")
      .def("__repr__", [](const PySegment& s) { return "Segment('" + s.name + "')"; });
}

void bind_batch(py::module_& m) {
  py::class_<PyBatch>(m, "Batch", "The requests of one Engine.submit(), each with its own outcome.")
      .def("__len__", [](const PyBatch& b) { return b.batch->size(); })
      .def_property_readonly(
          "done", [](const PyBatch& b) { return b.batch->done(); }, "Whether every request has finished.")
      .def_property_readonly(
          "failed", [](const PyBatch& b) { return b.batch->failed(); }, "Requests that failed so far.")
      .def("wait", &wait, py::arg("timeout") = py::none(), py::arg("check") = true,
           "Waits (GIL released) until every request finished; rdmakit.TimeoutError after `timeout` seconds. "
           "Returns results() when every request succeeded. When any failed, raises (the class of the first "
           "failure) an error whose message names every failed request with its code and status, and whose "
           "`failures` maps each failed request's index to its rdmakit.Error; with check=False it returns "
           "results() instead, where each request's outcome is None or its error.")
      .def("results", &results,
           "One entry per request once done: None when its bytes landed, else the rdmakit.Error "
           "(not raised) saying why it failed.")
      .def_property_readonly(
          "notified",
          [](const PyBatch& b) -> py::object {
            auto n = b.batch->notification();
            if (!n) return py::none();
            if (*n) return py::bool_(true);
            return exception_for(n->error());
          },
          "For a batch submitted with notify=: None until sent, True once the owner received it, else the "
          "rdmakit.Error (not raised) saying why not (a request failed: nothing is sent).")
      .def_property_readonly(
          "paths",
          [](const PyBatch& b) {
            auto paths = b.batch->paths();
            py::list memory;
            for (auto path : paths.memory) memory.append(to_string(path));
            py::dict out;
            out["transports"] = py::cast(paths.transports);
            out["memory"] = memory;
            out["file_requests_by_owner"] = paths.file_requests_by_owner;
            out["file_requests_local"] = paths.file_requests_local;
            return out;
          },
          "How its bytes travelled: {'transports': ['tcp', 'file', ...], 'memory': ['host', 'staged', ...], "
          "'file_requests_by_owner': n, 'file_requests_local': n} ('file': file segment requests this "
          "process read from the file itself, on the owner's host).");
  py::class_<PyPrepared>(
      m, "PreparedRequests",
      "Requests checked and planned once (Engine.prepare), for Engine.submit again and again.")
      .def("__len__", [](const PyPrepared& p) { return p.prepared->size(); });
}

void bind_engine(py::module_& m) {
  py::enum_<xfer::Op>(m, "XferOp", "What a transfer request does: READ from the segment or WRITE into it.")
      .value("READ", xfer::Op::Read)
      .value("WRITE", xfer::Op::Write);
  py::class_<PyXferEngine>(
      m, "Engine",
      "The transfer engine: publishes named segments and moves batches of READs and WRITEs "
      "between local memory and peers' segments. Engine(metadata, name=..., transports=[...], "
      "transport=..., ...) takes rdmakit::xfer::EngineOptions' fields (timeouts in seconds).")
      .def(py::init([](const PyMetadata& metadata, const py::kwargs& kwargs) {
             return PyXferEngine(make_core(metadata, kwargs));
           }),
           py::arg("metadata"))
      .def_property_readonly(
          "name", [](const PyXferEngine& e) { return e.engine().options().name; }, "This engine's name.")
      .def_property_readonly(
          "transports", [](const PyXferEngine& e) { return e.engine().options().transports; },
          "Transports it offers and uses.")
      .def_property_readonly("closed", &PyXferEngine::closed, "Whether close() was called.")
      .def(
          "allocate_segment", &allocate_segment, py::arg("name"), py::arg("size"), py::arg("ready") = true,
          "Allocates `size` bytes every transport reaches fast, publishes them as `name` and returns them as "
          "a writable uint8 numpy array (usable as local memory too). ready=False publishes nothing until "
          "publish_ready(name): fill the memory first, and no peer can find the name meanwhile.")
      .def(
          "publish_ready",
          [](PyXferEngine& self, const std::string& name) {
            const auto& core = self.get();
            unwrap(unlocked([&] { return core->engine->publish_ready(name); }));
          },
          py::arg("name"), "Publishes a segment allocated with ready=False.")
      .def(
          "publish_directory",
          [](PyXferEngine& self, const std::string& prefix, const std::string& dir, bool writable,
             bool allow_other_writers) {
            const auto& core = self.get();
            xfer::FileSegmentOptions options{.writable = writable,
                                             .allow_other_writers = allow_other_writers};
            return unwrap(unlocked([&] { return core->engine->publish_directory(prefix, dir, options); }));
          },
          py::arg("prefix"), py::arg("dir"), py::kw_only(), py::arg("writable") = false,
          py::arg("allow_other_writers") = false,
          "Publishes every regular, non-empty file directly in `dir` (not recursive; links, devices, "
          "subdirectories and dot files skipped) as the read-only file segment prefix + '/' + its name, and "
          "returns the segment names, sorted. All or nothing: on an error nothing of `dir` stays published. "
          "A file another uid may write is refused unless allow_other_writers=True.")
      .def("prepare", &prepare, py::arg("requests"),
           "Checks and plans requests once; submit() the result any number of times.")
      .def(
          "poll_notification",
          [](PyXferEngine& self) {
            const auto& core = self.get();
            return notification_tuple(core->engine->poll_notification());
          },
          "The oldest notification received as (sender, segment, message bytes), or None.")
      .def(
          "wait_notification",
          [](PyXferEngine& self, std::optional<double> timeout) {
            const auto& core = self.get();
            auto n = unwrap(
                unlocked([&] { return core->engine->wait_notification(to_timeout(timeout, kForever)); }));
            return notification_tuple(n);
          },
          py::arg("timeout") = py::none(),
          "Waits (GIL released) for a notification: (sender, segment, message bytes); rdmakit.TimeoutError "
          "after `timeout` seconds.")
      .def("publish", &publish, py::arg("name"), py::arg("obj"),
           "Publishes the memory of `obj` (a writable buffer: numpy array, bytearray, CPU tensor; or CUDA "
           "device "
           "memory exposing __cuda_array_interface__, offered only over the transports that take it) as "
           "`name`, without copying; the engine keeps `obj` alive until unpublish(). Usable as local memory "
           "too.")
      .def(
          "publish_file",
          [](PyXferEngine& self, const std::string& name, py::handle path, bool writable, bool sync_writes,
             bool allow_other_writers) {
            const auto& core = self.get();
            // str or os.PathLike (pathlib.Path)
            const auto text = py::module_::import("os").attr("fspath")(path).cast<std::string>();
            xfer::FileSegmentOptions options{
                .writable = writable, .sync_writes = sync_writes, .allow_other_writers = allow_other_writers};
            unwrap(unlocked([&] { return core->engine->publish_file(name, text, options); }));
          },
          py::arg("name"), py::arg("path"), py::arg("writable") = false, py::arg("sync_writes") = false,
          py::arg("allow_other_writers") = false,
          "Publishes the regular file at `path` as the file segment `name` (its size now): peers READ byte "
          "ranges of it into registered host memory, and WRITE ranges when writable=True (never beyond its "
          "size). sync_writes=True (writable only) completes each WRITE once it is on stable storage "
          "(O_DSYNC). A file another uid may change (owned by a uid other than ours or root, or writable by "
          "its group or everyone) is refused unless allow_other_writers=True. The owner serves it with "
          "io_uring; unpublish(name) stops serving it.")
      .def("unpublish", &unpublish, py::arg("name"), "Removes a segment this engine published.")
      .def("register_local", &register_local, py::arg("obj"),
           "Registers the memory of `obj` (writable buffer, CPU tensor, or __cuda_array_interface__ device "
           "memory) "
           "for requests to READ into or WRITE "
           "from (any slice of it); kept alive until unregister_local().")
      .def("unregister_local", &unregister_local, py::arg("obj"), "Undoes register_local(obj).")
      .def(
          "open_segment",
          [](PyXferEngine& self, const std::string& name) {
            const auto& core = self.get();
            auto handle = unwrap(unlocked([&] { return core->engine->open_segment(name); }));
            return PySegment{core, handle.value, name};
          },
          py::arg("name"),
          "Resolves `name` (one metadata lookup, then cached); NotFoundError when unpublished.")
      .def("submit", &submit, py::arg("requests"), py::arg("notify") = py::none(), py::arg("block") = true,
           "Submits (op, local, segment, offset[, length]) requests: op READ or WRITE, local a registered "
           "buffer (or a slice of one), length defaulting to the local buffer's size; or a PreparedRequests. "
           "Refuses the whole batch naming the first bad request; may block (GIL released) on back-pressure. "
           "notify=bytes: the segments' owner receives them (wait_notification) once every request "
           "succeeded. block=False: posts everything or raises ResourceExhaustedError ('would block').")
      .def(
          "stats", [](const PyXferEngine& e) { return stats_dict(e.engine().stats()); },
          "Counters: requests, work_requests, coalesced, retries, resolves, peak_inflight_per_peer, and "
          "rails (a\n"
          "list of {transport, device, work_requests}, one per rail).")
      .def("close", &PyXferEngine::close,
           "Unpublishes this engine's segments and drops the handle; the engine stops when its last batch, "
           "segment and allocated array are gone.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyXferEngine& e, py::args) { e.close(); });
}

}  // namespace

void bind_xfer_engine(py::module_& m) {
  bind_segment(m);
  bind_batch(m);
  bind_engine(m);
}

}  // namespace rdmakit::python
