// Bindings of the transfer engine's metadata stores (builtin, redis, etcd), the builtin server, and the
// weights broadcast (rdmakit::xfer::broadcast_send / broadcast_receive) over core contexts and regions.
#include <pybind11/stl.h>

#include <string>

#include "objects.hpp"
#include "rdmakit/xfer/broadcast.hpp"
#include "xfer.hpp"

namespace rdmakit::python {

PyMetadata::~PyMetadata() { close(); }

const std::shared_ptr<xfer::MetadataStore>& PyMetadata::get() const {
  if (!store_) raise(Errc::InvalidArgument, "the metadata store is closed");
  return store_;
}

// The last owner's close ends the lease with a round trip: not under the GIL.
void PyMetadata::close() noexcept {
  without_gil([&] { store_.reset(); });
}

namespace {

using namespace std::chrono;

std::vector<std::byte> to_bytes(const py::bytes& data) {
  const auto view = std::string_view(data);
  const auto* first = reinterpret_cast<const std::byte*>(view.data());
  return {first, first + view.size()};
}

class PyMetadataServer {
 public:
  explicit PyMetadataServer(std::unique_ptr<xfer::MetadataServer> server) : server_(std::move(server)) {}
  ~PyMetadataServer() { close(); }
  const xfer::MetadataServer& get() const {
    if (!server_) raise(Errc::InvalidArgument, "the metadata server is closed");
    return *server_;
  }
  void close() noexcept {
    without_gil([&] { server_.reset(); });
  }

 private:
  std::unique_ptr<xfer::MetadataServer> server_;
};

std::unique_ptr<PyMetadata> open_store(const std::string& url, const std::string& name_space, double ttl,
                                       double renew_interval, double timeout) {
  xfer::MetadataOptions options{.name_space = name_space,
                                .ttl = positive_ms(ttl, "ttl"),
                                .renew_interval = positive_ms(renew_interval, "renew_interval"),
                                .timeout = positive_ms(timeout, "timeout")};
  auto store = [&] {
    py::gil_scoped_release unlocked;  // reaches the server before it returns
    return xfer::open_metadata(url, options);
  }();
  return std::make_unique<PyMetadata>(std::shared_ptr<xfer::MetadataStore>(unwrap(std::move(store))));
}

void bind_store(py::module_& m) {
  py::class_<PyMetadata>(m, "MetadataStore",
                         "Where segment names live (rdmakit.xfer.open_metadata): keys in a namespace, bound "
                         "to this store's lease. A context manager; close() ends the lease once no engine "
                         "uses the store.")
      .def(
          "publish",
          [](const PyMetadata& self, const std::string& key, const py::bytes& value) {
            const auto store = self.get();
            auto bytes = to_bytes(value);
            py::gil_scoped_release unlocked;
            unwrap(store->publish(key, bytes));
          },
          py::arg("key"), py::arg("value"), "Publishes `value` under `key` (replaces a value of ours).")
      .def(
          "unpublish",
          [](const PyMetadata& self, const std::string& key) {
            const auto store = self.get();
            py::gil_scoped_release unlocked;
            unwrap(store->unpublish(key));
          },
          py::arg("key"), "Removes a key this store published.")
      .def(
          "lookup",
          [](const PyMetadata& self, const std::string& key) -> std::optional<py::bytes> {
            const auto store = self.get();
            auto value = [&] {
              py::gil_scoped_release unlocked;
              return store->lookup(key);
            }();
            auto found = unwrap(std::move(value));
            if (!found) return std::nullopt;
            return py::bytes(reinterpret_cast<const char*>(found->data()), found->size());
          },
          py::arg("key"), "The value under `key`, or None (never published, removed, or its owner died).")
      .def(
          "keys",
          [](const PyMetadata& self) {
            const auto store = self.get();
            py::gil_scoped_release unlocked;
            return unwrap(store->list());
          },
          "Every key of the namespace.")
      .def_property_readonly(
          "round_trips", [](const PyMetadata& self) { return self.get()->round_trips(); },
          "Metadata round trips made so far (lookups, publishes, renewals).")
      .def_property_readonly(
          "backend", [](const PyMetadata& self) { return std::string(self.get()->backend()); },
          "'builtin', 'redis' or 'etcd'.")
      .def("close", &PyMetadata::close, "Drops this handle (engines using the store keep it).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyMetadata& self, py::args) { self.close(); });

  m.def("open_metadata", &open_store, py::arg("url"), py::arg("namespace") = "rdmakit", py::arg("ttl") = 5.0,
        py::arg("renew_interval") = 1.0, py::arg("timeout") = 5.0,
        "Opens a metadata store: 'builtin://host:port', 'redis://host:port' or 'etcd://host:port'. Entries "
        "vanish `ttl` seconds after their publisher dies; every call is bounded by `timeout` seconds.");
}

void bind_server(py::module_& m) {
  py::class_<PyMetadataServer>(
      m, "MetadataServer",
      "A builtin metadata server running in this process (rdmakit.xfer.serve_metadata) "
      "until close().")
      .def_property_readonly(
          "url", [](const PyMetadataServer& s) { return s.get().url(); }, "'builtin://host:port'.")
      .def_property_readonly(
          "port", [](const PyMetadataServer& s) { return s.get().port(); }, "The port it listens on.")
      .def("close", &PyMetadataServer::close, "Stops the server.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyMetadataServer& s, py::args) { s.close(); });
  m.def(
      "serve_metadata",
      [](const std::string& address) {
        auto server = [&] {
          py::gil_scoped_release unlocked;
          return xfer::serve_builtin_metadata(address);
        }();
        return std::make_unique<PyMetadataServer>(unwrap(std::move(server)));
      },
      py::arg("address") = "127.0.0.1:0",
      "Serves the builtin metadata backend on 'host:port' (port 0: a free one) in a thread of this process.");
}

xfer::BroadcastOptions broadcast_options(const MemoryRegion& region, std::optional<std::uint64_t> size,
                                         std::uint32_t receivers, const std::string& session,
                                         std::uint64_t chunk_bytes, std::uint32_t window,
                                         const std::string& listen_address, double timeout) {
  return {.session = session,
          .receivers = receivers,
          .size = size.value_or(region.size()),
          .chunk_bytes = chunk_bytes,
          .window = window,
          .listen_address = listen_address,
          .timeout = positive_ms(timeout, "timeout")};
}

py::dict result_dict(const xfer::BroadcastResult& result) {
  py::dict d;
  d["seconds"] = duration<double>(result.elapsed).count(), d["chunks"] = result.chunks;
  return d;
}

void bind_broadcast(py::module_& m) {
  m.def(
      "broadcast_send",
      [](const PyContext& context, const PyMetadata& metadata, const PyRegion& source,
         std::uint32_t receivers, std::optional<std::uint64_t> size, const std::string& session,
         std::uint64_t chunk_bytes, std::uint32_t window, double timeout) {
        const auto ctx = context.get();
        const auto store = metadata.get();
        const auto region = source.get();
        auto options = broadcast_options(*region, size, receivers, session, chunk_bytes, window, "", timeout);
        auto result = [&] {
          py::gil_scoped_release unlocked;
          return xfer::broadcast_send(*ctx, *store, *region, options);
        }();
        return result_dict(unwrap(std::move(result)));
      },
      py::arg("context"), py::arg("metadata"), py::arg("source"), py::arg("receivers"),
      py::arg("size") = py::none(), py::arg("session") = "weights", py::arg("chunk_bytes") = 4u << 20,
      py::arg("window") = 8, py::arg("timeout") = 60.0,
      "Pushes `size` bytes (default: all) of the registered Region `source` down a chain of `receivers` "
      "(GIL released); returns {'seconds', 'chunks'}.");
  m.def(
      "broadcast_receive",
      [](const PyContext& context, const PyMetadata& metadata, const PyRegion& destination,
         std::uint32_t rank, std::uint32_t receivers, std::optional<std::uint64_t> size,
         const std::string& session, std::uint64_t chunk_bytes, std::uint32_t window,
         const std::string& listen_address, double timeout) {
        const auto ctx = context.get();
        const auto store = metadata.get();
        const auto region = destination.get();
        auto options = broadcast_options(*region, size, receivers, session, chunk_bytes, window,
                                         listen_address, timeout);
        auto result = [&] {
          py::gil_scoped_release unlocked;
          return xfer::broadcast_receive(*ctx, *store, *region, rank, options);
        }();
        return result_dict(unwrap(std::move(result)));
      },
      py::arg("context"), py::arg("metadata"), py::arg("destination"), py::arg("rank"), py::arg("receivers"),
      py::arg("size") = py::none(), py::arg("session") = "weights", py::arg("chunk_bytes") = 4u << 20,
      py::arg("window") = 8, py::arg("listen_address") = "", py::arg("timeout") = 60.0,
      "Receiver `rank` (1..receivers) of the chain: the bytes land in `destination` (REMOTE_WRITE access) "
      "and "
      "are forwarded to rank + 1; returns {'seconds', 'chunks'} once every chunk is here and forwarded.");
}

}  // namespace

void bind_xfer_metadata(py::module_& m) {
  bind_store(m);
  bind_server(m);
  bind_broadcast(m);
}

}  // namespace rdmakit::python
