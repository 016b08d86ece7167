// Bindings of the checkpoint engine (rdmakit::ckpt::Engine) over named numpy arrays / CPU tensors.
// The Python class rdmakit.ckpt.Checkpointer flattens dicts and state_dicts into the named list this takes.
#include <pybind11/stl.h>

#include "array.hpp"
#include "common.hpp"
#include "rdmakit/ckpt/engine.hpp"

namespace rdmakit::python {
namespace {

using ckpt::DType;

DType ckpt_dtype(const std::string& name) {
  static const std::pair<const char*, DType> kNames[] = {
      {"uint8", DType::U8},   {"bool", DType::U8},     {"int8", DType::I8},       {"uint16", DType::U16},
      {"int16", DType::I16},  {"uint32", DType::U32},  {"int32", DType::I32},     {"uint64", DType::U64},
      {"int64", DType::I64},  {"float16", DType::F16}, {"bfloat16", DType::BF16}, {"float32", DType::F32},
      {"float64", DType::F64}};
  for (const auto& [text, dtype] : kNames)
    if (name == text) return dtype;
  raise(Errc::NotSupported, "the checkpoint engine does not know dtype " + name);
}

struct PyEngine {
  std::vector<ArrayRef> arrays;  // declared first: destroyed after the engine that reads them
  std::unique_ptr<ckpt::Engine> engine;

  ckpt::Engine& get() const {
    if (!engine) raise(Errc::InvalidArgument, "the checkpoint engine is closed");
    return *engine;
  }
  template <typename Call>
  auto unlocked(Call call) {
    auto& e = get();
    py::gil_scoped_release released;
    return call(e);
  }
  ~PyEngine() {
    py::gil_scoped_release released;  // the destructor waits for the persist in progress
    engine.reset();
  }
};

py::dict report_dict(const ckpt::PersistReport& report) {
  py::dict d;
  d["step"] = report.step, d["path"] = report.path, d["bytes"] = report.bytes;
  d["reused_bytes"] = report.reused_bytes, d["direct_io"] = report.direct_io;
  d["replicated"] = report.replicated, d["write_seconds"] = report.write_seconds;
  d["total_seconds"] = report.total_seconds, d["deleted"] = report.deleted;
  return d;
}

std::unique_ptr<PyEngine> make_engine(const std::string& directory,
                                      const std::vector<std::pair<std::string, py::object>>& named,
                                      std::uint32_t keep, std::size_t chunk_bytes, std::uint32_t io_depth,
                                      bool lazy, bool incremental, bool direct_io) {
  auto result = std::make_unique<PyEngine>();
  std::vector<ckpt::Buffer> buffers;
  for (const auto& [name, object] : named) {
    result->arrays.push_back(array_ref(object, true));
    const auto& array = result->arrays.back();
    buffers.push_back(ckpt::Buffer{.name = name,
                                   .data = array.data,
                                   .size = array.bytes(),
                                   .dtype = ckpt_dtype(array.dtype),
                                   .shape = array.shape});
  }
  ckpt::EngineOptions options{.directory = directory,
                              .keep = keep,
                              .chunk_bytes = chunk_bytes,
                              .io_depth = io_depth,
                              .direct_io = direct_io,
                              .lazy = lazy,
                              .incremental = incremental};
  auto engine = [&] {
    py::gil_scoped_release released;
    return ckpt::Engine::create(options, std::move(buffers));
  }();
  result->engine = unwrap(std::move(engine));
  return result;
}

}  // namespace

void bind_ckpt(py::module_& m) {
  py::class_<PyEngine>(m, "_CkptEngine",
                       "The C++ checkpoint engine over named arrays (use rdmakit.ckpt.Checkpointer).")
      .def(py::init(&make_engine), py::arg("directory"), py::arg("buffers"), py::arg("keep") = 3,
           py::arg("chunk_bytes") = 4u << 20, py::arg("io_depth") = 4, py::arg("lazy") = false,
           py::arg("incremental") = false, py::arg("direct_io") = true)
      .def(
          "snapshot",
          [](PyEngine& e, std::uint64_t step) {
            unwrap(e.unlocked([&](auto& x) { return x.snapshot(step); }));
          },
          py::arg("step"), "Copies the state into staging and persists it in the background.")
      .def(
          "wait_snapshot", [](PyEngine& e) { unwrap(e.unlocked([](auto& x) { return x.wait_snapshot(); })); },
          "Returns when the copy of the last snapshot is complete (lazy mode).")
      .def(
          "wait_persisted",
          [](PyEngine& e) {
            return report_dict(unwrap(e.unlocked([](auto& x) { return x.wait_persisted(); })));
          },
          "Waits until the last snapshot is committed; its report.")
      .def(
          "restore_latest",
          [](PyEngine& e) -> std::optional<std::uint64_t> {
            auto step = e.unlocked([](auto& x) { return x.restore_latest(); });
            if (!step && step.error().code() == Errc::NotFound) return std::nullopt;
            return unwrap(std::move(step));
          },
          "Loads the newest good checkpoint into the arrays; its step, or None when there is none.")
      .def_property_readonly(
          "state_bytes", [](const PyEngine& e) { return e.get().state_bytes(); }, "Bytes of state.")
      .def(
          "close",
          [](PyEngine& e) {
            py::gil_scoped_release released;
            e.engine.reset();
          },
          "Waits for the checkpoint being persisted and stops the engine.");
}

}  // namespace rdmakit::python
