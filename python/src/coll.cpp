// Bindings of the collectives (rdmakit::coll::Communicator) on numpy arrays and CPU torch tensors.
// Blocking calls release the GIL; _async calls return a Work that holds the arrays until it is waited for
// (and waits in its destructor if it never was, so no collective writes into freed memory).
#include "coll.hpp"

#include <pybind11/stl.h>

#include <string>
#include <tuple>

#include "array.hpp"
#include "common.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace rdmakit::python {
namespace {

using coll::Communicator;
using coll::DataType;
using coll::ReduceOp;

DataType data_type(const std::string& dtype) {
  if (dtype == "float32") return DataType::F32;
  if (dtype == "float64") return DataType::F64;
  if (dtype == "float16") return DataType::F16;
  if (dtype == "bfloat16") return DataType::BF16;
  if (dtype == "int32") return DataType::I32;
  if (dtype == "int64") return DataType::I64;
  if (dtype == "uint8") return DataType::U8;
  raise(Errc::NotSupported, "collectives do not support dtype " + dtype +
                                " (float32, float64, float16, bfloat16, int32, int64, uint8)");
}

ReduceOp reduce_op(py::handle op) {
  if (py::isinstance<py::str>(op)) {
    const auto name = op.cast<std::string>();
    if (name == "sum") return ReduceOp::Sum;
    if (name == "prod") return ReduceOp::Prod;
    if (name == "min") return ReduceOp::Min;
    if (name == "max") return ReduceOp::Max;
    if (name == "avg") return ReduceOp::Avg;
    raise(Errc::InvalidArgument, "unknown reduce op '" + name + "' (sum, prod, min, max, avg)");
  }
  return op.cast<ReduceOp>();
}

// A collective in flight and everything it uses.
struct PyWork {
  std::shared_ptr<Communicator> communicator;  // alive while in flight, even after Communicator.close()
  coll::Work work;
  std::vector<ArrayRef> arrays;
  py::object result = py::none();
  bool waited = false;

  ~PyWork() {
    if (!waited && Py_IsInitialized()) {
      py::gil_scoped_release unlocked;
      (void)work.wait();
    }
  }
  py::object wait() {
    auto outcome = [&] {
      py::gil_scoped_release unlocked;
      return work.wait();
    }();
    waited = true;
    unwrap(std::move(outcome));
    arrays.clear();
    return result;
  }
};

// How a collective sizes recv against send (n = world size), and which element count it passes.
enum class Sizing {
  Same,      // recv as send; the count: send's elements
  Gather,    // recv = n x send; the count: send's elements
  Scatter,   // send = n x recv; the count: recv's elements
  AllToAll,  // recv as send, a multiple of n; the count: send's elements / n
};

// Send and receive sides of one call; recv None means in place.
struct Operands {
  ArrayRef send;
  ArrayRef recv;
  py::object result;
  DataType type;
  std::size_t count = 0;
};

Operands operands(py::handle send, py::handle recv, Sizing sizing, std::size_t n) {
  Operands o;
  const bool in_place = recv.is_none() || recv.is(send);
  o.send = array_ref(send, in_place);
  o.recv = in_place ? o.send : array_ref(recv, true);
  o.result = py::reinterpret_borrow<py::object>(in_place ? send : recv);
  if (o.send.dtype != o.recv.dtype)
    raise(Errc::InvalidArgument, "send is " + o.send.dtype + " but recv is " + o.recv.dtype);
  const std::size_t num = sizing == Sizing::Gather ? n : 1, den = sizing == Sizing::Scatter ? n : 1;
  if (!in_place && o.recv.count * den != o.send.count * num)
    raise(Errc::InvalidArgument, "recv has " + std::to_string(o.recv.count) + " elements; expected " +
                                     std::to_string(o.send.count * num / den));
  if (sizing == Sizing::AllToAll && o.send.count % n != 0)
    raise(Errc::InvalidArgument, "send's elements are not a multiple of the world size");
  o.type = data_type(o.send.dtype);
  o.count = sizing == Sizing::Scatter    ? o.recv.count
            : sizing == Sizing::AllToAll ? o.send.count / n
                                         : o.send.count;
  return o;
}

template <typename Call>
py::object run_blocking(const Operands& o, Call call) {
  auto outcome = [&] {
    py::gil_scoped_release unlocked;
    return call();
  }();
  unwrap(std::move(outcome));
  return o.result;
}

template <typename Call>
std::unique_ptr<PyWork> run_async(py::object self, Operands o, Call call) {
  auto work = std::make_unique<PyWork>();
  work->communicator = self.cast<PyCommunicator&>().comm;
  {
    py::gil_scoped_release unlocked;
    work->work = call();
  }
  work->result = o.result;
  work->arrays = {std::move(o.send), std::move(o.recv)};
  return work;
}

// One collective: its blocking and async members (the same parameters after send, recv, count and type)
// and how it sizes its arrays.
template <typename... Extra>
struct Collective {
  Result<void> (Communicator::*blocking)(const void*, void*, std::size_t, DataType, Extra...);
  coll::Work (Communicator::*async)(const void*, void*, std::size_t, DataType, Extra...);
  Sizing sizing;
};

// Defines `name` and `name_async`. PyExtra are the Python parameters after (send, recv), in Python's order;
// `convert` turns them into the C++ members' Extra parameters (a std::tuple, in C++'s order). `args`: the
// pybind11 names and defaults of recv and the PyExtra.
template <typename... PyExtra, typename... Extra, typename Convert, typename... Args>
void def_collective(py::class_<PyCommunicator>& cls, const std::string& name, Collective<Extra...> c,
                    Convert convert, const char* doc, Args... args) {
  const auto prepare = [c](py::object self, py::object send, py::object recv) {
    const auto n = static_cast<std::size_t>(self.cast<PyCommunicator&>().get().size());
    return operands(send, recv, c.sizing, n);
  };
  cls.def(
      name.c_str(),
      [c, convert, prepare](py::object self, py::object send, py::object recv, PyExtra... extra) {
        auto o = prepare(self, send, recv);
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_blocking(o, [&, cpp = convert(extra...)] {
          return std::apply(
              [&](auto... e) { return (comm.*c.blocking)(o.send.data, o.recv.data, o.count, o.type, e...); },
              cpp);
        });
      },
      py::arg("send"), args..., doc);
  const auto async_doc = name + ", returning a Work.";
  cls.def((name + "_async").c_str(),
          [c, convert, prepare](py::object self, py::object send, py::object recv, PyExtra... extra) {
            auto o = prepare(self, send, recv);
            auto& comm = self.cast<PyCommunicator&>().get();
            const auto cpp = convert(extra...);
            return run_async(self, std::move(o), [&] {
              return std::apply(
                  [&](auto... e) { return (comm.*c.async)(o.send.data, o.recv.data, o.count, o.type, e...); },
                  cpp);
            });
          },
          py::arg("send"), args..., async_doc.c_str());
}

const auto kNoExtra = [] { return std::tuple<>(); };
const auto kOp = [](py::object op) { return std::tuple(reduce_op(op)); };

void bind_methods(py::class_<PyCommunicator>& cls) {
  def_collective<py::object>(
      cls, "allreduce",
      Collective<ReduceOp>{&Communicator::allreduce, &Communicator::allreduce_async, Sizing::Same}, kOp,
      "recv = op over every rank's send (in place when recv is None); returns recv.",
      py::arg("recv") = py::none(), py::arg("op") = "sum");
  def_collective<int, py::object>(
      cls, "reduce",
      Collective<ReduceOp, int>{&Communicator::reduce, &Communicator::reduce_async, Sizing::Same},
      [](int root, py::object op) { return std::tuple(reduce_op(op), root); },
      "recv (at root only) = op over every rank's send.", py::arg("recv") = py::none(), py::arg("root") = 0,
      py::arg("op") = "sum");
  def_collective<int>(
      cls, "broadcast",
      Collective<int>{&Communicator::broadcast, &Communicator::broadcast_async, Sizing::Same},
      [](int root) { return std::tuple(root); },
      "recv = root's send on every rank (in place when recv is None).", py::arg("recv") = py::none(),
      py::arg("root") = 0);
  def_collective<>(cls, "allgather",
                   Collective<>{&Communicator::allgather, &Communicator::allgather_async, Sizing::Gather},
                   kNoExtra, "recv[r*n:(r+1)*n] = rank r's send (n = send's elements).", py::arg("recv"));
  def_collective<py::object>(cls, "reduce_scatter",
                             Collective<ReduceOp>{&Communicator::reduce_scatter,
                                                  &Communicator::reduce_scatter_async, Sizing::Scatter},
                             kOp, "recv (n elements) = op over every rank's send[rank*n:(rank+1)*n].",
                             py::arg("recv"), py::arg("op") = "sum");
  def_collective<>(cls, "all_to_all",
                   Collective<>{&Communicator::all_to_all, &Communicator::all_to_all_async, Sizing::AllToAll},
                   kNoExtra, "recv[r*n:(r+1)*n] = rank r's send[me*n:(me+1)*n].", py::arg("recv"));

  cls.def(
      "barrier",
      [](PyCommunicator& c) {
        auto outcome = [&] {
          py::gil_scoped_release unlocked;
          return c.get().barrier();
        }();
        unwrap(std::move(outcome));
      },
      "Returns when every rank has entered the barrier.");
  cls.def(
      "barrier_async",
      [](py::object self) {
        auto work = std::make_unique<PyWork>();
        auto& comm = self.cast<PyCommunicator&>().get();
        {
          py::gil_scoped_release unlocked;
          work->work = comm.barrier_async();
        }
        work->communicator = self.cast<PyCommunicator&>().comm;
        return work;
      },
      "barrier, returning a Work.");
}

coll::CommOptions comm_options(const std::string& key_prefix, std::optional<std::int64_t> timeout_ms,
                               const std::string& network_transport, const std::string& local_transport) {
  coll::CommOptions options;
  options.key_prefix = key_prefix;
  if (timeout_ms) options.timeout = std::chrono::milliseconds(*timeout_ms);
  if (!network_transport.empty()) options.network_transport = network_transport;  // else the option's value
  if (!local_transport.empty()) options.local_transport = local_transport;
  return options;
}

}  // namespace

void bind_coll(py::module_& m) {
  py::enum_<ReduceOp>(m, "ReduceOp", "Reduction of the collectives (strings 'sum', 'avg', ... work too).")
      .value("SUM", ReduceOp::Sum)
      .value("PROD", ReduceOp::Prod)
      .value("MIN", ReduceOp::Min)
      .value("MAX", ReduceOp::Max)
      .value("AVG", ReduceOp::Avg);
  py::class_<PyWork>(m, "Work", "A collective in flight: wait() returns its result array (or None).")
      .def("wait", &PyWork::wait, "Waits (GIL released) until the collective finished; raises its error.")
      .def(
          "done", [](const PyWork& w) { return w.waited || w.work.done(); }, "Whether it finished.");
  py::class_<PyCommunicator> cls(
      m, "Communicator",
      "A group of ranks running collectives on numpy arrays and CPU torch tensors. "
      "Every rank issues the same collectives in the same order.");
  cls.def_static(
         "from_environment",
         [](const std::string& key_prefix, std::optional<std::int64_t> timeout_ms,
            const std::string& network_transport, const std::string& local_transport) {
           auto options = comm_options(key_prefix, timeout_ms, network_transport, local_transport);
           auto comm = [&] {
             py::gil_scoped_release unlocked;
             return Communicator::from_environment(options);
           }();
           return PyCommunicator{std::shared_ptr<Communicator>(unwrap(std::move(comm)))};
         },
         py::arg("key_prefix") = "", py::arg("timeout_ms") = py::none(), py::arg("network_transport") = "",
         py::arg("local_transport") = "",
         "Joins the job described by torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun or srun "
         "variables. Empty strings and None take the RDMAKIT_* variables, then the defaults.")
      .def_property_readonly(
          "rank", [](const PyCommunicator& c) { return c.get().rank(); }, "This rank.")
      .def_property_readonly(
          "size", [](const PyCommunicator& c) { return c.get().size(); }, "World size.")
      .def_property_readonly(
          "local_rank", [](const PyCommunicator& c) { return c.get().local_rank(); },
          "Index among the ranks of this host.")
      .def_property_readonly(
          "local_size", [](const PyCommunicator& c) { return c.get().local_size(); }, "Ranks on this host.")
      .def_property_readonly(
          "host_rank", [](const PyCommunicator& c) { return c.get().host_rank(); },
          "This rank's host, numbered in the order of the hosts' lowest ranks (rank 0's host is 0).")
      .def_property_readonly(
          "host_count", [](const PyCommunicator& c) { return c.get().host_count(); }, "Hosts in the job.")
      .def_property_readonly(
          "transports", [](const PyCommunicator& c) { return c.get().transports(); },
          "'tcp', 'shm' or 'shm+tcp'.")
      .def(
          "close",
          [](PyCommunicator& c) {
            py::gil_scoped_release unlocked;
            c.comm.reset();
          },
          "Leaves the group once the Work objects still in flight are done (they hold it).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyCommunicator& c, py::args) {
        py::gil_scoped_release unlocked;
        c.comm.reset();
      });
  bind_methods(cls);
}

}  // namespace rdmakit::python
