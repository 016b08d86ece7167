// Bindings of the collectives (rdmakit::coll::Communicator) on numpy arrays and CPU torch tensors.
// Blocking calls release the GIL; _async calls return a Work that holds the arrays until it is waited for
// (and waits in its destructor if it never was, so no collective writes into freed memory).
#include <pybind11/stl.h>

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

struct PyCommunicator {
  std::shared_ptr<Communicator> comm;
  Communicator& get() const {
    if (!comm) raise(Errc::InvalidArgument, "the communicator is closed");
    return *comm;
  }
};

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

// Send and receive sides of one call; recv None means in place.
struct Operands {
  ArrayRef send;
  ArrayRef recv;
  py::object result;
  DataType type;
};

Operands operands(py::handle send, py::handle recv, std::size_t recv_factor_num,
                  std::size_t recv_factor_den) {
  Operands o;
  const bool in_place = recv.is_none() || recv.is(send);
  o.send = array_ref(send, in_place);
  o.recv = in_place ? o.send : array_ref(recv, true);
  o.result = py::reinterpret_borrow<py::object>(in_place ? send : recv);
  if (o.send.dtype != o.recv.dtype)
    raise(Errc::InvalidArgument, "send is " + o.send.dtype + " but recv is " + o.recv.dtype);
  if (!in_place && o.recv.count * recv_factor_den != o.send.count * recv_factor_num)
    raise(Errc::InvalidArgument, "recv has " + std::to_string(o.recv.count) + " elements; expected " +
                                     std::to_string(o.send.count * recv_factor_num / recv_factor_den));
  o.type = data_type(o.send.dtype);
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

// Defines name and name_async from one lambda taking (comm, operands, extra...) and a blocking flag.
void bind_methods(py::class_<PyCommunicator>& cls) {
  const auto size = [](py::handle self) {
    return static_cast<std::size_t>(self.cast<PyCommunicator&>().get().size());
  };

  cls.def(
      "allreduce",
      [](PyCommunicator& c, py::object send, py::object recv, py::object op) {
        auto o = operands(send, recv, 1, 1);
        return run_blocking(o, [&] {
          return c.get().allreduce(o.send.data, o.recv.data, o.send.count, o.type, reduce_op(op));
        });
      },
      py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum",
      "recv = op over every rank's send (in place when recv is None); returns recv.");
  cls.def(
      "allreduce_async",
      [](py::object self, py::object send, py::object recv, py::object op) {
        auto o = operands(send, recv, 1, 1);
        const auto rop = reduce_op(op);
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_async(self, std::move(o), [&] {
          return comm.allreduce_async(o.send.data, o.recv.data, o.send.count, o.type, rop);
        });
      },
      py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum", "allreduce, returning a Work.");

  cls.def(
      "reduce",
      [](PyCommunicator& c, py::object send, py::object recv, int root, py::object op) {
        auto o = operands(send, recv, 1, 1);
        return run_blocking(o, [&] {
          return c.get().reduce(o.send.data, o.recv.data, o.send.count, o.type, reduce_op(op), root);
        });
      },
      py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, py::arg("op") = "sum",
      "recv (at root only) = op over every rank's send.");
  cls.def(
      "reduce_async",
      [](py::object self, py::object send, py::object recv, int root, py::object op) {
        auto o = operands(send, recv, 1, 1);
        const auto rop = reduce_op(op);
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_async(self, std::move(o), [&] {
          return comm.reduce_async(o.send.data, o.recv.data, o.send.count, o.type, rop, root);
        });
      },
      py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, py::arg("op") = "sum",
      "reduce, returning a Work.");

  cls.def(
      "broadcast",
      [](PyCommunicator& c, py::object send, py::object recv, int root) {
        auto o = operands(send, recv, 1, 1);
        return run_blocking(
            o, [&] { return c.get().broadcast(o.send.data, o.recv.data, o.send.count, o.type, root); });
      },
      py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0,
      "recv = root's send on every rank (in place when recv is None).");
  cls.def(
      "broadcast_async",
      [](py::object self, py::object send, py::object recv, int root) {
        auto o = operands(send, recv, 1, 1);
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_async(self, std::move(o), [&] {
          return comm.broadcast_async(o.send.data, o.recv.data, o.send.count, o.type, root);
        });
      },
      py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, "broadcast, returning a Work.");

  cls.def(
      "allgather",
      [size](py::object self, py::object send, py::object recv) {
        auto o = operands(send, recv, size(self), 1);
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_blocking(o,
                            [&] { return comm.allgather(o.send.data, o.recv.data, o.send.count, o.type); });
      },
      py::arg("send"), py::arg("recv"), "recv[r*n:(r+1)*n] = rank r's send (n = send's elements).");
  cls.def(
      "allgather_async",
      [size](py::object self, py::object send, py::object recv) {
        auto o = operands(send, recv, size(self), 1);
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_async(self, std::move(o), [&] {
          return comm.allgather_async(o.send.data, o.recv.data, o.send.count, o.type);
        });
      },
      py::arg("send"), py::arg("recv"), "allgather, returning a Work.");

  cls.def(
      "reduce_scatter",
      [size](py::object self, py::object send, py::object recv, py::object op) {
        auto o = operands(send, recv, 1, size(self));
        auto& comm = self.cast<PyCommunicator&>().get();
        const auto rop = reduce_op(op);
        return run_blocking(
            o, [&] { return comm.reduce_scatter(o.send.data, o.recv.data, o.recv.count, o.type, rop); });
      },
      py::arg("send"), py::arg("recv"), py::arg("op") = "sum",
      "recv (n elements) = op over every rank's send[rank*n:(rank+1)*n].");
  cls.def(
      "reduce_scatter_async",
      [size](py::object self, py::object send, py::object recv, py::object op) {
        auto o = operands(send, recv, 1, size(self));
        auto& comm = self.cast<PyCommunicator&>().get();
        const auto rop = reduce_op(op);
        return run_async(self, std::move(o), [&] {
          return comm.reduce_scatter_async(o.send.data, o.recv.data, o.recv.count, o.type, rop);
        });
      },
      py::arg("send"), py::arg("recv"), py::arg("op") = "sum", "reduce_scatter, returning a Work.");

  cls.def(
      "all_to_all",
      [size](py::object self, py::object send, py::object recv) {
        auto o = operands(send, recv, 1, 1);
        const auto n = size(self);
        if (o.send.count % n != 0)
          raise(Errc::InvalidArgument, "send's elements are not a multiple of the world size");
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_blocking(
            o, [&] { return comm.all_to_all(o.send.data, o.recv.data, o.send.count / n, o.type); });
      },
      py::arg("send"), py::arg("recv"), "recv[r*n:(r+1)*n] = rank r's send[me*n:(me+1)*n].");
  cls.def(
      "all_to_all_async",
      [size](py::object self, py::object send, py::object recv) {
        auto o = operands(send, recv, 1, 1);
        const auto n = size(self);
        if (o.send.count % n != 0)
          raise(Errc::InvalidArgument, "send's elements are not a multiple of the world size");
        auto& comm = self.cast<PyCommunicator&>().get();
        return run_async(self, std::move(o), [&] {
          return comm.all_to_all_async(o.send.data, o.recv.data, o.send.count / n, o.type);
        });
      },
      py::arg("send"), py::arg("recv"), "all_to_all, returning a Work.");

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
