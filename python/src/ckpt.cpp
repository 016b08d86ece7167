// Bindings of the checkpoint engine (rdmakit::ckpt::Engine) over named numpy arrays / CPU tensors.
// The Python class rdmakit.ckpt.Checkpointer flattens dicts and state_dicts into the named list this takes.
#include <pybind11/stl.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "array.hpp"
#include "coll.hpp"
#include "common.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/ckpt/store.hpp"

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

// What one buffer was when the engine was made, to compare with checkpoints and with the array later.
struct Layout {
  std::string name;
  DType dtype = DType::U8;
  std::vector<std::uint64_t> shape;
};

// Python callbacks from the engine's persist thread, and the interpreter's exit. Once the interpreter
// finalizes, a thread that takes the GIL is ended inside PyEval_AcquireThread (a forced unwind through the
// engine's C++ frames) or blocks for ever; so an atexit hook, which runs before finalization starts, closes
// the gate: it waits (GIL released) for the callbacks in progress, and none starts after it.
class CallbackGate {
 public:
  static CallbackGate& get() {
    static auto* gate = new CallbackGate;  // never destroyed: persist threads may outlive static destructors
    return *gate;
  }
  bool enter() {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    ++running_;
    return true;
  }
  void leave() {
    std::lock_guard lock(mutex_);
    if (--running_ == 0) idle_.notify_all();
  }
  void close() {  // the atexit hook, GIL held: released while the running callbacks finish
    py::gil_scoped_release released;
    std::unique_lock lock(mutex_);
    closed_ = true;
    idle_.wait(lock, [&] { return running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  int running_ = 0;
  bool closed_ = false;
};

py::dict report_dict(const ckpt::PersistReport& report);

// EngineOptions::on_persisted for a Python callable: fn(step, report dict) once committed, fn(step,
// rdmakit.Error instance) once failed. Called on the persist thread (or, for a multi-rank outcome settled
// later, on the thread of the engine call, which released the GIL). An exception the callable raises is
// reported through sys.unraisablehook (printed by default) and the engine carries on; the next snapshot
// waits for the callable to return. Owned by PyEngine, which holds the GIL when it drops it.
class PersistCallback {
 public:
  explicit PersistCallback(py::object fn) : fn_(std::move(fn)) {}

  void operator()(std::uint64_t step, const Result<ckpt::PersistReport>& outcome) const {
    auto& gate = CallbackGate::get();
    if (!gate.enter()) return;  // the interpreter is exiting: Python can no longer be called
    {
      py::gil_scoped_acquire gil;
      call(step, outcome);
    }
    gate.leave();
  }

 private:
  void call(std::uint64_t step, const Result<ckpt::PersistReport>& outcome) const {
    try {
      fn_(step, outcome ? py::object(report_dict(*outcome)) : exception_for(outcome.error()));
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable("rdmakit.ckpt on_persisted callback");
    } catch (const std::exception& error) {  // a C++ exception out of pybind11 (a failed conversion)
      PyErr_SetString(PyExc_RuntimeError, error.what());
      PyErr_WriteUnraisable(fn_.ptr());
    }
  }

  py::object fn_;
};

struct PyEngine {
  std::vector<ArrayRef> arrays;  // declared first: destroyed after the engine that reads them
  std::unique_ptr<PersistCallback> on_persisted;  // before `engine`: outlives it, dropped with the GIL held
  std::shared_ptr<coll::Communicator> communicator;  // before `engine`: the engine's collectives run on it
  std::vector<Layout> layout;                        // one per array, same order
  std::string directory;
  std::optional<std::uint64_t> newest;  // the newest step saved here or committed in the directory
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

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The engine copies to and from the addresses it was given. A torch tensor can move its storage or change
// its size in place (resize_(), set_(), `.data = ...`), which would leave the engine writing freed memory:
// refused, naming the tensor. (numpy arrays cannot: the buffer the engine holds blocks their resize.)
void check_unchanged(const PyEngine& e) {
  for (std::size_t i = 0; i < e.arrays.size(); ++i) {
    const auto& array = e.arrays[i];
    if (!array.keep) continue;
    const auto& tensor = array.keep;
    std::vector<std::uint64_t> shape;
    for (auto dim : tensor.attr("shape")) shape.push_back(dim.cast<std::uint64_t>());
    const auto address = tensor.attr("data_ptr")().cast<std::uintptr_t>();
    const bool contiguous = tensor.attr("is_contiguous")().cast<bool>();
    if (address == reinterpret_cast<std::uintptr_t>(array.data) && shape == array.shape && contiguous)
      continue;
    raise(Errc::InvalidArgument,
          "ckpt: tensor '" + e.layout[i].name + "' changed since the Checkpointer was made (shape " +
              shape_text(array.shape) + " -> " + shape_text(shape) +
              (address != reinterpret_cast<std::uintptr_t>(array.data) ? ", storage moved" : "") +
              (contiguous ? "" : ", no longer contiguous") +
              ": resize_(), set_() or assigning .data); checkpointed tensors must be updated in place, or "
              "the Checkpointer made again");
  }
}

// Why checkpoint `manifest` does not fit the buffers (names, dtypes, shapes), or "" when it does.
std::string layout_difference(const ckpt::Manifest& manifest, const std::vector<Layout>& layout) {
  std::map<std::string, const ckpt::TensorEntry*> theirs;
  for (const auto& tensor : manifest.tensors) theirs[tensor.name] = &tensor;
  for (const auto& mine : layout) {
    const auto found = theirs.find(mine.name);
    if (found == theirs.end()) return "'" + mine.name + "' is not in it";
    const auto& entry = *found->second;
    if (entry.dtype != mine.dtype || entry.shape != mine.shape)
      return "'" + mine.name + "' is " + std::string(to_string(mine.dtype)) + " " + shape_text(mine.shape) +
             " here but " + std::string(to_string(entry.dtype)) + " " + shape_text(entry.shape) + " in it";
    theirs.erase(found);
  }
  if (!theirs.empty()) return "it also holds '" + theirs.begin()->first + "', which the state lacks";
  return "";
}

// restore_latest() found nothing it could load. A committed checkpoint whose layout differs from the
// buffers means the state no longer matches what was saved (a changed model, an optimizer without its
// state yet): starting afresh silently would lose the run, so, as torch's load_state_dict(strict=True),
// this is an error naming the difference.
void refuse_mismatch(const PyEngine& e) {
  auto found = ckpt::list_checkpoints(e.directory);
  if (!found) return;
  for (const auto& info : *found) {
    if (!info.problem.empty()) continue;
    const auto why = layout_difference(info.manifest, e.layout);
    if (why.empty()) continue;
    raise(Errc::InvalidArgument, "ckpt: no checkpoint in " + e.directory + " matches the state: in step " +
                                     std::to_string(info.step) + ", " + why +
                                     " (restore_latest(strict=False) starts afresh instead)");
  }
}

// The newest step committed in `directory`, if any (damaged ones do not count: restore skips them).
std::optional<std::uint64_t> newest_committed(const std::string& directory) {
  auto found = ckpt::list_checkpoints(directory);
  if (!found) return std::nullopt;
  for (const auto& info : *found)
    if (info.problem.empty()) return info.step;
  return std::nullopt;
}

void snapshot(PyEngine& e, py::handle step_arg) {
  const auto step = int_arg<std::uint64_t>(step_arg, "step");
  e.get();
  check_unchanged(e);
  // restore_latest() takes the newest step: an older one saved after it would never be restored.
  if (e.newest && step < *e.newest)
    raise(Errc::InvalidArgument, "ckpt: step " + std::to_string(step) + " is older than step " +
                                     std::to_string(*e.newest) +
                                     ", the newest checkpoint: restore_latest() would never load it");
  unwrap(e.unlocked([&](auto& x) { return x.snapshot(step); }));
  e.newest = step;
}

// `only`: None (every buffer) or an iterable of buffer names (a subset restore).
std::vector<std::string> names_arg(py::handle only) {
  std::vector<std::string> names;
  if (only.is_none()) return names;
  if (py::isinstance<py::str>(only))  // a lone name would otherwise be taken letter by letter
    raise(Errc::InvalidArgument, "ckpt: `only` must be a list of buffer names, not a string");
  for (auto name : only) {
    if (!py::isinstance<py::str>(name))
      raise(Errc::InvalidArgument,
            "ckpt: `only` must hold buffer names (str), not " + py::repr(name).cast<std::string>());
    names.push_back(name.cast<std::string>());
  }
  if (names.empty())  // an empty selection would load everything: surely not what an empty list meant
    raise(Errc::InvalidArgument, "ckpt: `only` is empty (None restores every buffer)");
  return names;
}

std::optional<std::uint64_t> restore_latest(PyEngine& e, bool strict, py::handle only_arg) {
  const auto only = names_arg(only_arg);
  e.get();
  check_unchanged(e);
  auto step = e.unlocked([&](auto& x) { return x.restore_latest(only); });
  if (!step && step.error().code() == Errc::NotFound) {
    if (strict) refuse_mismatch(e);
    return std::nullopt;
  }
  return unwrap(std::move(step));
}

// A chosen step (Engine::restore): that step or an error, never another one.
std::uint64_t restore_step(PyEngine& e, py::handle step_arg, py::handle only_arg) {
  const auto step = int_arg<std::uint64_t>(step_arg, "step");
  const auto only = names_arg(only_arg);
  e.get();
  check_unchanged(e);
  return unwrap(e.unlocked([&](auto& x) { return x.restore(step, only); }));
}

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
                                      py::handle keep, py::handle chunk_bytes, py::handle io_depth, bool lazy,
                                      bool incremental, bool direct_io, py::object on_persisted,
                                      const std::string& replica, py::object communicator) {
  if (!on_persisted.is_none() && !PyCallable_Check(on_persisted.ptr()))
    raise(Errc::InvalidArgument, "ckpt: on_persisted must be callable (step, outcome), not " +
                                     py::repr(on_persisted).cast<std::string>());
  auto result = std::make_unique<PyEngine>();
  result->directory = directory;
  std::vector<ckpt::Buffer> buffers;
  for (const auto& [name, object] : named) {
    result->arrays.push_back(array_ref(object, true));
    const auto& array = result->arrays.back();
    result->layout.push_back(Layout{name, ckpt_dtype(array.dtype), array.shape});
    buffers.push_back(ckpt::Buffer{.name = name,
                                   .data = array.data,
                                   .size = array.bytes(),
                                   .dtype = ckpt_dtype(array.dtype),
                                   .shape = array.shape});
  }
  ckpt::EngineOptions options{.directory = directory,
                              .keep = int_arg<std::uint32_t>(keep, "keep"),
                              .chunk_bytes = int_arg<std::size_t>(chunk_bytes, "chunk_bytes"),
                              .io_depth = int_arg<std::uint32_t>(io_depth, "io_depth"),
                              .direct_io = direct_io,
                              .lazy = lazy,
                              .incremental = incremental,
                              .replica = replica};
  // A multi-rank checkpoint: every rank of the communicator makes its engine together (create is collective).
  if (!communicator.is_none()) {
    if (!py::isinstance<PyCommunicator>(communicator))
      raise(Errc::InvalidArgument, "ckpt: communicator must be an rdmakit.Communicator, not " +
                                       py::repr(communicator).cast<std::string>());
    result->communicator = communicator.cast<PyCommunicator&>().comm;
    if (!result->communicator) raise(Errc::InvalidArgument, "ckpt: the communicator is closed");
    options.communicator = result->communicator.get();
  }
  if (!on_persisted.is_none()) {
    result->on_persisted = std::make_unique<PersistCallback>(std::move(on_persisted));
    options.on_persisted = [callback = result->on_persisted.get()](
                               std::uint64_t step, const Result<ckpt::PersistReport>& outcome) {
      (*callback)(step, outcome);
    };
  }
  auto engine = [&] {
    py::gil_scoped_release released;
    return ckpt::Engine::create(options, std::move(buffers));
  }();
  result->engine = unwrap(std::move(engine));
  result->newest = newest_committed(directory);
  return result;
}

}  // namespace

void bind_ckpt(py::module_& m) {
  // Registered at import, so it runs before finalization (and after the atexit hooks registered later).
  py::module_::import("atexit").attr("register")(
      py::cpp_function([] { CallbackGate::get().close(); }, py::name("_rdmakit_ckpt_close_callbacks")));
  py::class_<PyEngine>(m, "_CkptEngine",
                       "The C++ checkpoint engine over named arrays (use rdmakit.ckpt.Checkpointer).")
      .def(py::init(&make_engine), py::arg("directory"), py::arg("buffers"), py::arg("keep") = 3,
           py::arg("chunk_bytes") = 4u << 20, py::arg("io_depth") = 4, py::arg("lazy") = false,
           py::arg("incremental") = false, py::arg("direct_io") = true, py::arg("on_persisted") = py::none(),
           py::arg("replica") = std::string(), py::arg("communicator") = py::none())
      .def("snapshot", &snapshot, py::arg("step"),
           "Copies the state into staging and persists it in the background; refuses a step older than the "
           "newest checkpoint and a tensor that changed since the engine was made.")
      .def(
          "wait_snapshot", [](PyEngine& e) { unwrap(e.unlocked([](auto& x) { return x.wait_snapshot(); })); },
          "Returns when the copy of the last snapshot is complete (lazy mode).")
      .def(
          "wait_persisted",
          [](PyEngine& e) {
            return report_dict(unwrap(e.unlocked([](auto& x) { return x.wait_persisted(); })));
          },
          "Waits until the last snapshot is committed; its report.")
      .def("restore_latest", &restore_latest, py::arg("strict") = true, py::arg("only") = py::none(),
           "Loads the newest good checkpoint into the arrays; its step, or None when there is none. With "
           "`strict`, checkpoints that exist but whose names, dtypes or shapes differ from the arrays are "
           "InvalidArgumentError instead of None. `only`: the names of the arrays to load (the others are "
           "left untouched; the whole checkpoint is still verified), None for all.")
      .def("restore", &restore_step, py::arg("step"), py::arg("only") = py::none(),
           "Loads checkpoint `step` into the arrays (those named in `only`, if given) and returns it; "
           "NotFoundError when it is not there or does not verify (never another step).")
      .def_property_readonly(
          "newest_step", [](const PyEngine& e) { return e.newest; },
          "The newest step saved by this engine or committed in the directory when it was made, or None.")
      .def_property_readonly(
          "state_bytes", [](const PyEngine& e) { return e.get().state_bytes(); }, "Bytes of state.")
      .def_property_readonly(
          "restored_from", [](const PyEngine& e) { return e.get().restored_from(); },
          "Where the last restore's data came from: the checkpoint's directory, or 'replica at <address>' "
          "('' before any restore).")
      .def(
          "close",
          [](PyEngine& e) {
            py::gil_scoped_release released;
            e.engine.reset();
          },
          "Waits for the checkpoint being persisted and stops the engine.");
}

}  // namespace rdmakit::python
