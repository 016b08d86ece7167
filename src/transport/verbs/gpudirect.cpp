#include "transport/verbs/gpudirect.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rdmakit::verbs_impl {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

GpuDirectProbe probe_gpudirect(const GpuDirectInputs& inputs, int device) {
  GpuDirectProbe probe;
  // dmabuf first: it needs no out-of-tree module, and NCCL and UCX prefer it too.
  const int nic = inputs.nic_dmabuf_errno ? inputs.nic_dmabuf_errno() : ENOSYS;
  std::optional<int> driver;
  if (nic == EBADF && inputs.driver_dmabuf) driver = inputs.driver_dmabuf(device);
  if (nic == EBADF && driver.value_or(0) == 1) {
    probe.path = GpuDirect::Dmabuf;
    probe.detail = "dmabuf (ibv_reg_dmabuf_mr and CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)";
    return probe;
  }
  std::string dmabuf;
  if (nic == EBADF)
    dmabuf = driver ? "the CUDA driver says device " + std::to_string(device) +
                          " has no dmabuf support (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is " +
                          std::to_string(*driver) + ")"
                    : "the CUDA driver could not be asked about dmabuf support";
  else if (nic == ENOSYS)
    dmabuf = "no dmabuf support in libibverbs or the NIC's provider (ibv_reg_dmabuf_mr: ENOSYS)";
  else
    dmabuf = "no dmabuf support in the kernel or the NIC's provider (ibv_reg_dmabuf_mr: " +
             std::string(std::strerror(nic)) + ")";
  const std::string root = inputs.sysfs_root;
  for (const char* module : {"/sys/module/nvidia_peermem", "/sys/kernel/mm/memory_peers/nv_mem"}) {
    if (!exists(root + module)) continue;
    probe.path = GpuDirect::Peermem;
    probe.detail = "peer memory (" + std::string(module) + "); " + dmabuf;
    return probe;
  }
  probe.detail = dmabuf + ", and no nvidia_peermem module (" + root + "/sys/module/nvidia_peermem)";
  return probe;
}

Error remote_device_memory_refused(const GpuDirectProbe& probe, int device, Access access) {
  return Error(
      Errc::NotSupported,
      "register_memory: the verbs transport cannot offer CUDA device memory (device " +
          std::to_string(device) + ") for remote access (" + to_string(access) +
          ") without GPUDirect RDMA: " + probe.detail +
          ". Load nvidia_peermem or use a NIC, kernel and CUDA driver with dmabuf support; or register "
          "it with local access only (LocalWrite): it is then staged through host memory as the local "
          "side of an operation");
}

}  // namespace rdmakit::verbs_impl
