// Bindings of Connection: every operation, chains (WorkRequest), receives and waits. Each posted
// operation pins the Region objects it uses (PinTable) until its completion, or a later one, is seen.
#include <pybind11/stl.h>

#include "objects.hpp"

namespace rdmakit::python {
namespace {

using namespace std::chrono;

// Chains at least this long are posted with the GIL released (building a long chain's requests is the
// transport's work, and other Python threads can run meanwhile); short ones are not worth the switch.
constexpr std::size_t kReleaseGilChain = 8;

// One request of a chain as Python builds it.
struct PyWorkRequest {
  Opcode opcode = Opcode::Write;
  py::object local = py::none();
  py::object remote = py::none();
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint32_t imm = 0;
  bool with_imm = false;
  bool signaled = true;
};

bool is_one_sided(Opcode opcode) { return opcode != Opcode::Send; }

// Posts `requests` (each with its local side converted) and pins their regions under their ids.
std::uint64_t post_chain(PyConnection& self, const std::vector<PyWorkRequest>& requests) {
  if (requests.empty()) raise(Errc::InvalidArgument, "an empty chain");
  const auto connection = self.get();
  std::vector<LocalSide> locals;
  std::vector<WorkRequest> chain;
  locals.reserve(requests.size());
  chain.reserve(requests.size());
  for (const auto& request : requests) {
    locals.push_back(request.local.is_none() ? LocalSide{} : local_side(request.local));
    WorkRequest wr{.opcode = request.opcode, .local = locals.back().segments};
    if (is_one_sided(request.opcode)) {
      if (request.remote.is_none()) raise(Errc::InvalidArgument, "a one-sided request needs a remote side");
      wr.remote = remote_side(request.remote);
    }
    wr.compare_add = request.compare_add, wr.swap = request.swap, wr.imm = request.imm;
    wr.with_imm = request.with_imm, wr.signaled = request.signaled;
    chain.push_back(wr);
  }
  auto first = [&] {
    if (chain.size() < kReleaseGilChain) return connection->post(chain);
    py::gil_scoped_release unlocked;
    return connection->post(chain);
  }();
  const auto id = unwrap(std::move(first));
  for (std::size_t i = 0; i < locals.size(); ++i) self.pins().pin(id + i, std::move(locals[i].regions));
  return id;
}

std::uint64_t post_one(PyConnection& self, PyWorkRequest request) {
  return post_chain(self, {std::move(request)});
}

Completion wait_for(PyConnection& self, std::uint64_t id, std::optional<double> timeout, bool check) {
  const auto connection = self.get();
  auto completion = unwrap(wait_in_slices(to_timeout(timeout, kForever),
                                          [&](nanoseconds slice) { return connection->wait(id, slice); }));
  self.pins().release_through(completion.id);
  if (check && !completion.ok())
    raise(Error(Errc::TransportFailure,
                "operation " + std::to_string(id) + " (" + std::string(to_string(completion.opcode)) +
                    ") completed with " + std::string(to_string(completion.status)),
                0, completion.status));
  return completion;
}

py::dict peer_dict(const PeerInfo& peer) {
  py::dict d;
  d["name"] = peer.name, d["id"] = peer.id, d["epoch"] = peer.epoch, d["address"] = peer.address;
  return d;
}

void bind_work_request(py::module_& m) {
  py::class_<PyWorkRequest>(m, "WorkRequest", "One operation of a chain posted by Connection.post().")
      .def(py::init([](Opcode opcode, py::object local, py::object remote, py::handle compare_add,
                       py::handle swap, py::handle imm, bool with_imm, bool signaled) {
             return PyWorkRequest{opcode,
                                  local,
                                  remote,
                                  int_arg<std::uint64_t>(compare_add, "compare_add"),
                                  int_arg<std::uint64_t>(swap, "swap"),
                                  int_arg<std::uint32_t>(imm, "imm"),
                                  with_imm,
                                  signaled};
           }),
           py::arg("opcode"), py::arg("local") = py::none(), py::arg("remote") = py::none(),
           py::arg("compare_add") = 0, py::arg("swap") = 0, py::arg("imm") = 0, py::arg("with_imm") = false,
           py::arg("signaled") = true,
           "opcode: rdmakit.Opcode; local: Region, Slice or list of them; remote: RemoteRegion or "
           "RemoteAddress (one-sided); compare_add: expected value (COMPARE_SWAP) or addend (FETCH_ADD); "
           "swap: new value; imm: immediate (WRITE_IMM, SEND with with_imm); signaled=False: no completion "
           "on success.")
      .def_readwrite("opcode", &PyWorkRequest::opcode, "rdmakit.Opcode.")
      .def_readwrite("local", &PyWorkRequest::local, "Local side.")
      .def_readwrite("remote", &PyWorkRequest::remote, "Remote side.")
      .def_readwrite("compare_add", &PyWorkRequest::compare_add, "Expected value or addend.")
      .def_readwrite("swap", &PyWorkRequest::swap, "New value of COMPARE_SWAP.")
      .def_readwrite("imm", &PyWorkRequest::imm, "Immediate value.")
      .def_readwrite("with_imm", &PyWorkRequest::with_imm, "SEND carries imm.")
      .def_readwrite("signaled", &PyWorkRequest::signaled, "Whether success produces a completion.");
}

}  // namespace

void bind_connection(py::module_& m) {
  bind_work_request(m);
  py::class_<PyConnection>(m, "Connection",
                           "A reliable, ordered connection (an RC queue pair). Operations return an id; "
                           "wait(id) returns its Completion. Usable as a context manager.")
      .def("post", &post_chain, py::arg("chain"),
           "Posts a list of WorkRequest in one go; they get consecutive ids, the first is returned.")
      .def(
          "write",
          [](PyConnection& self, py::object local, py::object remote, bool signaled) {
            return post_one(
                self, {.opcode = Opcode::Write, .local = local, .remote = remote, .signaled = signaled});
          },
          py::arg("local"), py::arg("remote"), py::arg("signaled") = true,
          "RDMA WRITE of `local` (Region, Slice or list) to `remote` (RemoteRegion or RemoteAddress).")
      .def(
          "write_imm",
          [](PyConnection& self, py::object local, py::object remote, py::handle imm) {
            return post_one(self, {.opcode = Opcode::WriteImm,
                                   .local = local,
                                   .remote = remote,
                                   .imm = int_arg<std::uint32_t>(imm, "imm")});
          },
          py::arg("local"), py::arg("remote"), py::arg("imm"),
          "RDMA WRITE with immediate: consumes a posted receive at the peer, which completes with `imm`.")
      .def(
          "read",
          [](PyConnection& self, py::object local, py::object remote) {
            return post_one(self, {.opcode = Opcode::Read, .local = local, .remote = remote});
          },
          py::arg("local"), py::arg("remote"), "RDMA READ of `remote` into `local` (needs LOCAL_WRITE).")
      .def(
          "compare_swap",
          [](PyConnection& self, py::object old_value, py::object remote, py::handle expected,
             py::handle desired) {
            return post_one(self, {.opcode = Opcode::CompareSwap,
                                   .local = old_value,
                                   .remote = remote,
                                   .compare_add = int_arg<std::uint64_t>(expected, "expected"),
                                   .swap = int_arg<std::uint64_t>(desired, "desired")});
          },
          py::arg("old_value"), py::arg("remote"), py::arg("expected"), py::arg("desired"),
          "8-byte compare-and-swap at `remote` (8-byte aligned); the old value lands in the 8-byte "
          "`old_value` slice.")
      .def(
          "fetch_add",
          [](PyConnection& self, py::object old_value, py::object remote, py::handle add) {
            return post_one(self, {.opcode = Opcode::FetchAdd,
                                   .local = old_value,
                                   .remote = remote,
                                   .compare_add = int_arg<std::uint64_t>(add, "add")});
          },
          py::arg("old_value"), py::arg("remote"), py::arg("add"),
          "8-byte fetch-and-add at `remote`; the old value lands in the 8-byte `old_value` slice.")
      .def(
          "send",
          [](PyConnection& self, py::object local) {
            return post_one(self, {.opcode = Opcode::Send, .local = local});
          },
          py::arg("local"), "Two-sided SEND; consumes a receive the peer posted.")
      .def(
          "send_imm",
          [](PyConnection& self, py::object local, py::handle imm) {
            return post_one(self, {.opcode = Opcode::Send,
                                   .local = local,
                                   .imm = int_arg<std::uint32_t>(imm, "imm"),
                                   .with_imm = true});
          },
          py::arg("local"), py::arg("imm"), "SEND carrying an immediate value.")
      .def(
          "post_recv",
          [](PyConnection& self, py::object local) {
            auto side = local_side(local);
            const auto id = unwrap(self.get()->post_recv(side.segments));
            self.pins().pin(id, std::move(side.regions));
            return id;
          },
          py::arg("local"), "Posts a receive buffer for a SEND or a WRITE with immediate; returns its id.")
      .def(
          "wait", &wait_for, py::arg("id"), py::arg("timeout") = py::none(), py::arg("check") = true,
          "Waits (GIL released) for operation `id`. Raises rdmakit.TimeoutError after `timeout` seconds, and "
          "(check=True) rdmakit.OperationError / RemoteAccessError when it completed with an error status.")
      .def_property_readonly(
          "number", [](const PyConnection& c) { return c.get()->number(); },
          "Context-unique number (Completion.connection).")
      .def_property_readonly(
          "peer", [](const PyConnection& c) { return peer_dict(c.get()->peer()); },
          "Who is at the other end: name, id, epoch, address.")
      .def(
          "stats", [](const PyConnection& c) { return stats_dict(c.get()->stats()); },
          "Operations posted, completed and outstanding, the failure if any, and the transport's own "
          "counters by name (transport_counters).")
      .def(
          "health", [](const PyConnection& c) { unwrap(c.get()->health()); },
          "Returns None while healthy; raises the connection's first failure (sticky) afterwards.")
      .def_readonly("send_cq", &PyConnection::send_cq,
                    "The shared CompletionQueue given at connect, or None.")
      .def_readonly("recv_cq", &PyConnection::recv_cq,
                    "The shared CompletionQueue given at connect, or None.")
      .def(
          "close",
          [](PyConnection& self) {
            if (auto* connection = [&]() -> Connection* {
                  try {
                    return self.get().get();
                  } catch (...) {
                    return nullptr;
                  }
                }()) {
              py::gil_scoped_release unlocked;
              connection->close();
            }
            self.close();
          },
          "Closes the connection: pending operations complete as FLUSHED. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyConnection& self, py::args) { self.close(); });
}

}  // namespace rdmakit::python
