// Bindings of the core: enums, descriptors, Context, Region, Slice, CompletionQueue, Listener.
#include <pybind11/stl.h>

#include <cctype>
#include <map>
#include <string>
#include <variant>

#include "objects.hpp"
#include "rdmakit/options.hpp"
#include "rdmakit/transports.hpp"

namespace rdmakit::python {
namespace {

using namespace std::chrono;

// The text of a Context keyword's value, as RDMAKIT_<NAME> would give it; the option's table parses it (and
// names the option when it does not). Integers, strings, booleans and WaitMode only: any other type (a
// float, a list) is refused here, since its text would only half-mean something.
std::string option_text(py::handle value, const std::string& name) {
  if (PyBool_Check(value.ptr())) return value.cast<bool>() ? "yes" : "no";
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<WaitMode>(value)) {
    std::string text = py::str(value.attr("name")).cast<std::string>();  // SPIN -> spin
    for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }
  if (PyIndex_Check(value.ptr()))
    return py::str(py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr())));
  raise(Errc::InvalidArgument,
        "Context option '" + name + "': " + py::repr(value).cast<std::string>() + " has the wrong type");
}

// Context(transport=..., timeout_ms=..., device=...): every keyword is set by name (Options::set), so the
// core's and each transport's tables decide what is an option and what parses; no list is kept here.
Options options_from(const py::kwargs& kwargs) {
  Options options;
  for (auto [key, value] : kwargs) {
    const auto name = key.cast<std::string>();
    options.set(name, option_text(value, name));
  }
  return options;
}

// The options a Context takes: the core's and every built transport's (their tables' layers).
bool is_context_option(const OptionInfo& info) {
  if (info.layer == "core") return true;
  for (const auto& transport : built_transports())
    if (info.layer == transport.name) return true;
  return false;
}

Access access_from(std::uint32_t bits) {
  if (bits > static_cast<std::uint32_t>(Access::All))
    raise(Errc::InvalidArgument, "access has unknown bits: " + std::to_string(bits));
  return static_cast<Access>(bits);
}

bool writes_locally_or_remotely(Access access) {
  return has(access, Access::LocalWrite) || has(access, Access::RemoteWrite) ||
         has(access, Access::RemoteAtomic);
}

py::dict option_dict(const OptionInfo& info) {
  py::dict d;
  d["name"] = info.name, d["env"] = info.env, d["value"] = info.value;
  d["default"] = info.default_value, d["doc"] = info.doc, d["layer"] = info.layer;
  return d;
}

}  // namespace

py::dict stats_dict(const ConnectionStats& stats) {
  py::dict d;
  d["connection"] = stats.connection, d["peer"] = stats.peer, d["posted"] = stats.posted;
  d["completed"] = stats.completed, d["outstanding"] = stats.outstanding;
  d["last_completion"] = duration<double>(stats.last_completion.time_since_epoch()).count();
  d["failed"] = stats.failed, d["failure"] = stats.failure;
  py::dict counters;  // the transport's own, by name (tcp: ack_frames, ...)
  for (const auto& counter : stats.transport_counters) counters[py::str(counter.name)] = counter.value;
  d["transport_counters"] = counters;
  return d;
}

namespace {

py::object make_region(PyContext& self, py::handle object, std::uint32_t access_bits) {
  const auto access = access_from(access_bits);
  const auto& context = self.get();
  auto buffer =
      std::make_shared<HeldBuffer>(object, writes_locally_or_remotely(access), Placement::HostOrDevice);
  void* data = buffer->data();
  const auto size = buffer->size();
  if (size == 0) raise(Errc::InvalidArgument, "the buffer is empty: nothing to register");
  auto region = [&] {
    py::gil_scoped_release unlocked;  // pinning a large buffer takes a while on verbs
    return context->register_memory(data, size, access, buffer->kind());
  }();
  return py::cast(std::make_unique<PyRegion>(context, unwrap(std::move(region)), std::move(buffer)));
}

void bind_enums(py::module_& m) {
  py::enum_<Status>(m, "Status", "Completion status of an operation (verbs' ibv_wc_status names).")
      .value("SUCCESS", Status::Success)
      .value("LOCAL_LENGTH", Status::LocalLength)
      .value("LOCAL_PROTECTION", Status::LocalProtection)
      .value("LOCAL_QP_OPERATION", Status::LocalQpOperation)
      .value("REMOTE_ACCESS", Status::RemoteAccess)
      .value("REMOTE_INVALID_REQUEST", Status::RemoteInvalidRequest)
      .value("REMOTE_OPERATION", Status::RemoteOperation)
      .value("RNR_RETRY_EXCEEDED", Status::RnrRetryExceeded)
      .value("TRANSPORT_RETRY_EXCEEDED", Status::TransportRetryExceeded)
      .value("FLUSHED", Status::Flushed)
      .value("GENERAL_ERROR", Status::GeneralError);
  py::enum_<Errc>(m, "Errc", "Why a call failed (rdmakit::Errc).")
      .value("INVALID_ARGUMENT", Errc::InvalidArgument)
      .value("NOT_SUPPORTED", Errc::NotSupported)
      .value("NOT_FOUND", Errc::NotFound)
      .value("UNAVAILABLE", Errc::Unavailable)
      .value("CONNECTION_REFUSED", Errc::ConnectionRefused)
      .value("CONNECTION_BROKEN", Errc::ConnectionBroken)
      .value("STALE_DESCRIPTOR", Errc::StaleDescriptor)
      .value("TIMEOUT", Errc::Timeout)
      .value("RESOURCE_EXHAUSTED", Errc::ResourceExhausted)
      .value("PROTOCOL_ERROR", Errc::ProtocolError)
      .value("SYSTEM_ERROR", Errc::SystemError)
      .value("TRANSPORT_FAILURE", Errc::TransportFailure);
  py::enum_<Opcode>(m, "Opcode", "What an operation or completion is.")
      .value("WRITE", Opcode::Write)
      .value("WRITE_IMM", Opcode::WriteImm)
      .value("READ", Opcode::Read)
      .value("COMPARE_SWAP", Opcode::CompareSwap)
      .value("FETCH_ADD", Opcode::FetchAdd)
      .value("SEND", Opcode::Send)
      .value("RECV", Opcode::Recv)
      .value("RECV_WRITE_IMM", Opcode::RecvWriteImm);
  py::enum_<WaitMode>(m, "WaitMode",
                      "How a waiter waits: SPIN polls, BLOCK sleeps, HYBRID spins then sleeps.")
      .value("SPIN", WaitMode::Spin)
      .value("BLOCK", WaitMode::Block)
      .value("HYBRID", WaitMode::Hybrid);
}

void bind_descriptors(py::module_& m) {
  py::class_<RemoteAddress>(m, "RemoteAddress",
                            "An address and key at the peer: where a one-sided operation lands.")
      .def(py::init([](py::handle addr, py::handle rkey, py::handle epoch) {
             return RemoteAddress{int_arg<std::uint64_t>(addr, "addr"), int_arg<std::uint32_t>(rkey, "rkey"),
                                  int_arg<std::uint64_t>(epoch, "owner_epoch")};
           }),
           py::arg("addr"), py::arg("rkey"), py::arg("owner_epoch") = 0,
           "An address built by hand (owner_epoch 0: not checked against the peer's epoch).")
      .def_readonly("addr", &RemoteAddress::addr, "Virtual address at the peer.")
      .def_readonly("rkey", &RemoteAddress::rkey, "Remote key.")
      .def_readonly("owner_epoch", &RemoteAddress::owner_epoch,
                    "Epoch of the owner's context (0: unchecked).")
      .def("__repr__", [](const RemoteAddress& a) {
        return "RemoteAddress(addr=" + std::to_string(a.addr) + ", rkey=" + std::to_string(a.rkey) + ")";
      });
  py::class_<RemoteRegion>(m, "RemoteRegion",
                           "A remote descriptor: what a peer needs to reach a registered region. Travels as "
                           "bytes (bytes(descriptor), RemoteRegion.from_bytes).")
      .def_static(
          "from_bytes",
          [](py::bytes data) {
            const auto view = std::string_view(data);
            return unwrap(RemoteRegion::deserialize(
                std::span(reinterpret_cast<const std::byte*>(view.data()), view.size())));
          },
          py::arg("data"),
          "Parses the 48 bytes of to_bytes(); rdmakit.InvalidArgumentError when they are not one.")
      .def_static(
          "from_hex", [](const std::string& text) { return unwrap(RemoteRegion::from_hex(text)); },
          py::arg("text"), "Parses to_hex() text.")
      .def(
          "to_bytes",
          [](const RemoteRegion& r) {
            const auto bytes = r.serialize();
            return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          "The 48-byte serialized descriptor.")
      .def("__bytes__",
           [](const RemoteRegion& r) {
             const auto bytes = r.serialize();
             return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           })
      .def("to_hex", &RemoteRegion::to_hex, "Hex text of to_bytes(), for command lines and files.")
      .def(
          "at",
          [](const RemoteRegion& r, py::handle offset_arg, py::handle length_arg) {
            const auto offset = int_arg<std::uint64_t>(offset_arg, "offset");
            const auto length = optional_int_arg<std::uint64_t>(length_arg, "length");
            if (!length) return r.at(offset);
            return unwrap(r.at(offset, *length));
          },
          py::arg("offset") = 0, py::arg("length") = py::none(),
          "The RemoteAddress `offset` bytes into the region. With `length`, checked here: the range must lie "
          "inside the region (InvalidArgumentError otherwise); without, bounds are checked by the target.")
      .def_readonly("addr", &RemoteRegion::addr, "Start address at the owner.")
      .def_readonly("length", &RemoteRegion::length, "Length in bytes.")
      .def_readonly("rkey", &RemoteRegion::rkey, "Remote key.")
      .def_property_readonly(
          "access", [](const RemoteRegion& r) { return static_cast<std::uint32_t>(r.access); },
          "Access bits granted (rdmakit.Access).")
      .def_readonly("owner_id", &RemoteRegion::owner_id, "Identity of the owner's context.")
      .def_readonly("owner_epoch", &RemoteRegion::owner_epoch, "Epoch of the owner's context.")
      .def("__len__", [](const RemoteRegion& r) { return r.length; })
      .def("__eq__",
           [](const RemoteRegion& a, const RemoteRegion& b) { return a.serialize() == b.serialize(); })
      .def("__repr__", [](const RemoteRegion& r) {
        return "RemoteRegion(addr=" + std::to_string(r.addr) + ", length=" + std::to_string(r.length) +
               ", rkey=" + std::to_string(r.rkey) + ", access=" + to_string(r.access) + ")";
      });
  py::class_<Completion>(m, "Completion", "The outcome of one operation or receive.")
      .def_readonly("id", &Completion::id, "The id post() or post_recv() returned.")
      .def_readonly("status", &Completion::status, "rdmakit.Status.SUCCESS, or why it failed.")
      .def_readonly("opcode", &Completion::opcode, "What completed (rdmakit.Opcode).")
      .def_readonly("has_imm", &Completion::has_imm, "Whether imm carries an immediate value.")
      .def_readonly("bytes", &Completion::bytes, "Bytes received (receives) or moved (READ, atomics).")
      .def_readonly("imm", &Completion::imm, "The immediate value when has_imm.")
      .def_readonly("connection", &Completion::connection, "Number of the connection it belongs to.")
      .def_property_readonly("ok", &Completion::ok, "status == Status.SUCCESS.")
      .def("__repr__", [](const Completion& c) {
        return "Completion(id=" + std::to_string(c.id) + ", status=" + std::string(to_string(c.status)) +
               ", opcode=" + std::string(to_string(c.opcode)) + ", bytes=" + std::to_string(c.bytes) +
               (c.has_imm ? ", imm=" + std::to_string(c.imm) : std::string()) + ")";
      });
}

void bind_region(py::module_& m) {
  m.def("_live_objects", &live_native_objects,
        "Debug: how many native objects of each kind (Context, Connection, MemoryRegion, CompletionQueue, "
        "Listener, HeldBuffer) the bindings created that are still alive, wherever their last reference is.");
  py::class_<RegionMemory>(m, "_RegionMemory", py::buffer_protocol(), "The bytes behind Region.view().")
      .def_buffer([](RegionMemory& memory) {
        const bool readonly = memory.buffer ? memory.buffer->readonly() : false;
        return py::buffer_info(memory.region->data(), 1, "B", 1,
                               {static_cast<py::ssize_t>(memory.region->size())}, {1}, readonly);
      });
  py::class_<PySlice>(m, "Slice",
                      "Bytes [offset, offset + length) of a Region: a local scatter-gather entry.")
      .def_readonly("region", &PySlice::region, "The Region.")
      .def_readonly("offset", &PySlice::offset, "Offset into the region.")
      .def_readonly("length", &PySlice::length, "Length in bytes.")
      .def("__len__", [](const PySlice& s) { return s.length; });
  py::class_<PyRegion>(m, "Region",
                       "Registered memory. Keeps the registered object alive (and, for bytearray and mmap, "
                       "unresizable) until close() or until it is garbage; usable as a context manager.")
      .def_property_readonly("obj", &PyRegion::owner, "The registered object (None for allocate()d memory).")
      .def_property_readonly(
          "address", [](const PyRegion& r) { return reinterpret_cast<std::uintptr_t>(r.get()->data()); },
          "Address of the first byte.")
      .def("__len__", [](const PyRegion& r) { return r.get()->size(); })
      .def_property_readonly(
          "size", [](const PyRegion& r) { return r.get()->size(); }, "Size in bytes.")
      .def_property_readonly(
          "access", [](const PyRegion& r) { return static_cast<std::uint32_t>(r.get()->access()); },
          "Access bits (rdmakit.Access).")
      .def_property_readonly(
          "lkey", [](const PyRegion& r) { return r.get()->lkey(); }, "Local key.")
      .def_property_readonly(
          "rkey", [](const PyRegion& r) { return r.get()->rkey(); }, "Remote key.")
      .def_property_readonly(
          "descriptor", [](const PyRegion& r) { return r.get()->descriptor(); },
          "The RemoteRegion a peer needs (send bytes(region.descriptor)).")
      .def_property_readonly(
          "kind", [](const PyRegion& r) { return to_string(r.get()->kind()); },
          "Where the memory lives: 'host' or 'cuda'.")
      .def_property_readonly(
          "path", [](const PyRegion& r) { return to_string(r.get()->path()); },
          "The path its bytes take: 'host', 'staged', 'cuda-ipc', 'gpudirect-dmabuf' or 'gpudirect-peermem'.")
      .def_property_readonly("closed", &PyRegion::closed, "Whether close() was called.")
      .def(
          "slice",
          [](py::object self, py::handle offset_arg, py::handle length_arg) {
            const auto offset = int_arg<std::uint64_t>(offset_arg, "offset");
            const auto length = optional_int_arg<std::uint64_t>(length_arg, "length");
            const auto size = self.cast<PyRegion&>().get()->size();
            const auto n = length.value_or(size >= offset ? size - offset : 0);
            if (offset > size || n > size - offset)
              raise(Errc::InvalidArgument, "slice [" + std::to_string(offset) + ", +" + std::to_string(n) +
                                               ") is outside the region of " + std::to_string(size) +
                                               " bytes");
            if (n > UINT32_MAX) raise(Errc::InvalidArgument, "a slice is at most 4 GiB - 1 bytes");
            return PySlice{self, offset, static_cast<std::uint32_t>(n)};
          },
          py::arg("offset") = 0, py::arg("length") = py::none(),
          "Bytes [offset, offset + length) (to the end when length is None) as a Slice.")
      .def(
          "__getitem__",
          [](py::object self, py::slice range) {
            const auto size = self.cast<PyRegion&>().get()->size();
            py::ssize_t start = 0, stop = 0, step = 0, count = 0;
            if (!range.compute(static_cast<py::ssize_t>(size), &start, &stop, &step, &count))
              throw py::error_already_set();
            if (step != 1) raise(Errc::InvalidArgument, "a region slice has step 1");
            return self.attr("slice")(start, std::max<py::ssize_t>(count, 0));
          },
          "region[a:b] is region.slice(a, b - a).")
      .def(
          "view",
          [](const PyRegion& r) {
            // The CPU cannot read device memory: a view of it would crash the process on first use.
            if (r.get()->kind() == MemoryKind::Cuda)
              raise(Errc::InvalidArgument,
                    "view(): the region is CUDA device memory, which the CPU cannot read");
            return py::memoryview(py::cast(RegionMemory{r.buffer(), r.get()}));
          },
          "A memoryview of the registered bytes; it keeps the memory valid even after close().")
      .def(
          "close", [](PyRegion& r) { r.close(); },
          "Deregisters the memory and lets go of the object. Operations still using it fail or complete.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyRegion& r, py::args) { r.close(); });
}

void bind_queue(py::module_& m) {
  py::class_<PyCompletionQueue>(
      m, "CompletionQueue", "Completions of many connections (Context.connect(send_cq=..., recv_cq=...)).")
      .def(
          "poll",
          [](PyCompletionQueue& self, std::size_t max) {
            std::vector<Completion> out(std::max<std::size_t>(max, 1));
            out.resize(self.get()->poll(out));
            for (const auto& c : out) self.completed(c);
            return out;
          },
          py::arg("max") = 16, "Up to `max` ready completions, oldest first; never blocks.")
      .def(
          "wait",
          [](PyCompletionQueue& self, std::size_t max, std::optional<double> timeout,
             std::optional<WaitMode> mode) {
            std::vector<Completion> out(std::max<std::size_t>(max, 1));
            const auto queue = self.get();
            auto taken =
                wait_in_slices(to_timeout(timeout, kForever), [&](nanoseconds slice) -> Result<std::size_t> {
                  auto n = mode ? queue->wait(out, slice, *mode) : queue->wait(out, slice);
                  if (n && *n == 0) return fail(Errc::Timeout, "no completion");
                  return n;
                });
            if (!taken && taken.error().code() == Errc::Timeout) taken = 0;
            out.resize(unwrap(std::move(taken)));
            for (const auto& c : out) self.completed(c);
            return out;
          },
          py::arg("max") = 16, py::arg("timeout") = py::none(), py::arg("mode") = py::none(),
          "Waits (GIL released) until at least one completion is ready; [] after `timeout` seconds.")
      .def(
          "wait_for",
          [](PyCompletionQueue& self, std::uint64_t id, std::optional<double> timeout) {
            const auto queue = self.get();
            auto c = unwrap(wait_in_slices(to_timeout(timeout, kForever),
                                           [&](nanoseconds slice) { return queue->wait_for(id, slice); }));
            self.completed(c);
            return c;
          },
          py::arg("id"), py::arg("timeout") = py::none(),
          "The completion of operation `id` (others stay queued); rdmakit.TimeoutError when it does not "
          "come.")
      .def("close", &PyCompletionQueue::close, "Drops this handle (connections using the queue keep it).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyCompletionQueue& q, py::args) { q.close(); });
}

void bind_context(py::module_& m) {
  py::class_<PyContext>(
      m, "Context",
      "One transport endpoint: registers memory, listens, connects. Context(transport='tcp', "
      "timeout_ms=..., device='rxe0', ...) takes the options of rdmakit.describe_options(), the core's "
      "and every built transport's (one of another transport than the one opened is ignored); unset "
      "ones come from RDMAKIT_<NAME> variables, then defaults.")
      .def(py::init([](py::kwargs kwargs) { return PyContext(unwrap(Context::open(options_from(kwargs)))); }))
      .def_property_readonly(
          "transport", [](const PyContext& c) { return std::string(c.get()->transport()); },
          "'tcp', 'shm', 'verbs' or 'fault:<inner>'.")
      .def_property_readonly("closed", &PyContext::closed, "Whether close() was called.")
      .def_property_readonly(
          "capabilities",
          [](const PyContext& c) {
            py::dict d;  // every field, from the library's listing
            for (const auto& row : describe_capabilities(c.get()->capabilities()))
              d[py::str(row.name)] = std::visit([](const auto& v) { return py::cast(v); }, row.value);
            return d;
          },
          "What the transport can do, as a dict.")
      .def_property_readonly(
          "identity",
          [](const PyContext& c) {
            const auto id = c.get()->identity();
            py::dict d;
            d["name"] = id.name, d["id"] = id.id, d["epoch"] = id.epoch, d["address"] = id.address;
            return d;
          },
          "This context's identity as peers see it: name, id, epoch.")
      .def(
          "config",
          [](const PyContext& c) {
            py::list out;
            for (const auto& info : describe_options(c.get()->config())) out.append(option_dict(info));
            return out;
          },
          "The effective configuration: one dict (name, env, value, default, doc) per option.")
      .def(
          "register",
          [](PyContext& self, py::handle object, py::handle access) {
            return make_region(self, object, int_arg<std::uint32_t>(access, "access"));
          },
          py::arg("obj"), py::arg("access") = 7,
          "Registers the memory of `obj` without copying: any buffer-protocol object (numpy array, "
          "bytearray, "
          "memoryview, mmap), a contiguous CPU torch tensor, or CUDA device memory exposing "
          "__cuda_array_interface__ (a CUDA tensor, CuPy or Numba array: Region.kind is then 'cuda'). Write "
          "access (LOCAL_WRITE, REMOTE_WRITE, "
          "REMOTE_ATOMIC) needs a writable buffer. The Region keeps `obj` alive.")
      .def(
          "allocate",
          [](PyContext& self, py::handle size_arg, py::handle access_arg) {
            const auto size = int_arg<std::size_t>(size_arg, "size");
            const auto access = access_from(int_arg<std::uint32_t>(access_arg, "access"));
            const auto context = self.get();
            auto region = [&] {
              py::gil_scoped_release unlocked;
              return context->allocate(size, access);
            }();
            return std::make_unique<PyRegion>(context, unwrap(std::move(region)), nullptr);
          },
          py::arg("size"), py::arg("access") = 7,
          "Memory rdmakit allocates and registers (page-aligned, zeroed; on shm peers map it directly).")
      .def(
          "create_cq",
          [](PyContext& self, py::handle depth) {
            const auto context = self.get();
            return std::make_unique<PyCompletionQueue>(
                context, unwrap(context->create_cq(int_arg<std::size_t>(depth, "depth"))));
          },
          py::arg("depth") = 0, "A completion queue to share between connections.")
      .def(
          "listen",
          [](PyContext& self, const std::string& address) {
            const auto context = self.get();
            auto listener = [&] {
              py::gil_scoped_release unlocked;
              return context->listen(address);
            }();
            return std::make_unique<PyListener>(context, unwrap(std::move(listener)));
          },
          py::arg("address") = "", "Listens on 'host:port' (default: the listen_address option, loopback).")
      .def(
          "connect",
          [](PyContext& self, const std::string& address, py::object send_cq, py::object recv_cq) {
            const auto context = self.get();
            ConnectOptions options;
            if (!send_cq.is_none()) options.send_cq = send_cq.cast<PyCompletionQueue&>().get();
            if (!recv_cq.is_none()) options.recv_cq = recv_cq.cast<PyCompletionQueue&>().get();
            auto connection = [&] {
              py::gil_scoped_release unlocked;
              return context->connect(address, options);
            }();
            return std::make_unique<PyConnection>(context, unwrap(std::move(connection)), send_cq, recv_cq);
          },
          py::arg("address"), py::arg("send_cq") = py::none(), py::arg("recv_cq") = py::none(),
          "Connects to a listener's address; completions go to the given queues or the connection's own.")
      .def(
          "diagnostics",
          [](const PyContext& c) {
            py::list out;
            for (const auto& s : c.get()->diagnostics()) out.append(stats_dict(s));
            return out;
          },
          "Stats of every live connection (posted, completed, outstanding, failure, ...).")
      .def("close", &PyContext::close,
           "Drops this handle; regions, listeners and connections made from it keep the context until they "
           "go.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyContext& c, py::args) { c.close(); });

  py::class_<PyListener>(m, "Listener", "Accepts connections (Context.listen()).")
      .def_property_readonly(
          "address", [](const PyListener& l) { return l.get()->address(); },
          "The address peers connect to, e.g. '127.0.0.1:43121'.")
      .def(
          "accept",
          [](PyListener& self, std::optional<double> timeout, py::object send_cq, py::object recv_cq) {
            const auto listener = self.get();
            ConnectOptions options;
            if (!send_cq.is_none()) options.send_cq = send_cq.cast<PyCompletionQueue&>().get();
            if (!recv_cq.is_none()) options.recv_cq = recv_cq.cast<PyCompletionQueue&>().get();
            auto connection = wait_in_slices(to_timeout(timeout, kForever), [&](nanoseconds slice) {
              return listener->accept(duration_cast<milliseconds>(slice) + milliseconds(1), options);
            });
            return std::make_unique<PyConnection>(self.context(), unwrap(std::move(connection)), send_cq,
                                                  recv_cq);
          },
          py::arg("timeout") = py::none(), py::arg("send_cq") = py::none(), py::arg("recv_cq") = py::none(),
          "Waits (GIL released) for a peer to connect; rdmakit.TimeoutError after `timeout` seconds.")
      .def("close", &PyListener::close, "Stops listening.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyListener& l, py::args) { l.close(); });
}

}  // namespace

void bind_core(py::module_& m) {
  bind_enums(m);
  bind_descriptors(m);
  bind_region(m);
  bind_queue(m);
  bind_context(m);
  m.def(
      "describe_options",
      [] {
        py::list out;
        for (const auto& info : unwrap(describe_options()))
          if (is_context_option(info)) out.append(option_dict(info));
        return out;
      },
      "Every option a Context takes, the core's and each built transport's: name, env variable, effective "
      "value (from the environment), default, doc, and layer (core or the transport's name).");
}

}  // namespace rdmakit::python
