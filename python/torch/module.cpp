// rdmakit._rdmakit_torch: the backend's process group as a Python class deriving from torch's
// ProcessGroup (torch 1.13) or Backend (torch 2.x), so torch.distributed (and DDP's C++ reducer) use it
// like gloo's. rdmakit.distributed registers it under the name "rdmakit".
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.hpp"
#include "tensor_util.hpp"

namespace py = pybind11;
using rdmakit::torch_backend::ProcessGroupRdmakit;

PYBIND11_MODULE(_rdmakit_torch, module) {
  module.doc() = "The rdmakit backend of torch.distributed (import rdmakit.distributed to register it).";
  // The base class is registered by torch's own extension: it must be loaded first.
  py::module_::import("torch.distributed");

  py::class_<ProcessGroupRdmakit, rdmakit::torch_backend::BackendBase,
             c10::intrusive_ptr<ProcessGroupRdmakit>>(
      module, "ProcessGroupRdmakit",
      "A torch.distributed process group whose collectives and send/recv run on rdmakit's communicator.")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             // Creation waits for every rank; other Python threads keep running meanwhile.
             py::gil_scoped_release released;
             return ProcessGroupRdmakit::create(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           "Meets the other ranks through `store` (torch's c10d Store) and connects to them.")
      .def_property_readonly("transports", &ProcessGroupRdmakit::transports,
                             "What carries this rank's traffic: 'tcp', 'shm' or 'shm+tcp'.")
      .def("_abort", &ProcessGroupRdmakit::abort, py::arg("reason"), py::call_guard<py::gil_scoped_release>(),
           "Fails this rank's collectives in progress and to come, tells the peers that it aborts and "
           "closes its connections (for a process that exits on an error: rdmakit.distributed calls it).");
  module.attr("TORCH_MAJOR") = rdmakit::torch_backend::kTorch2 ? 2 : 1;
  // Tests: the check every collective runs on each tensor's device, for devices a CPU build of torch cannot
  // make tensors on ("cuda:1").
  module.def(
      "_device_refusal",
      [](const std::string& device, const std::string& op) {
        return rdmakit::torch_backend::device_refusal(c10::Device(device), op);
      },
      py::arg("device"), py::arg("op"),
      "Why the backend refuses a tensor on `device` in `op` (None for the CPU).");

  module.def(
      "detect_launch",
      [] {
        auto info = rdmakit::bootstrap::detect_launch();
        if (!info)
          throw std::runtime_error("rdmakit: reading the launcher's environment failed: " +
                                   info.error().describe());
        py::dict out;
        out["rank"] = info->rank;
        out["world_size"] = info->world_size;
        out["local_rank"] = info->local_rank;
        out["local_size"] = info->local_size;
        out["store_host"] = info->store_host;
        out["store_port"] = info->store_port;
        out["launcher"] = info->launcher;
        out["job_id"] = info->job_id;
        return out;
      },
      "Where this process sits in the job, as rdmakit reads the launcher's environment (torchrun, mpirun, "
      "srun): a dict of rank, world_size, local_rank, local_size, store_host, store_port, launcher, job_id.");
}
