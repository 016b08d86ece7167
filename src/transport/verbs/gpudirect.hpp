// GPUDirect RDMA over verbs: whether the NIC can DMA to and from CUDA device memory, probed once per context
// and device the way UCX and NCCL do, and what registration then does:
// - dmabuf: libibverbs has ibv_reg_dmabuf_mr and the kernel and provider implement it (a call with fd -1
//   fails with EBADF; EOPNOTSUPP or ENOSYS mean no), and the CUDA driver says
//   CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: the whole allocation is exported once
//   (cuMemGetHandleForAddressRange) and registered with ibv_reg_dmabuf_mr at the region's offset in it;
// - peer memory: the nvidia_peermem module (or Mellanox's older nv_mem peer client) is loaded, so ibv_reg_mr
//   accepts a device pointer;
// - neither: device memory is staged through a host bounce buffer (local access only: no remote access to it
//   can work, so a region that grants one is refused, naming what is missing).
// The inputs are functions and a sysfs root, so each branch is tested without a NIC or a GPU.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "rdmakit/error.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::verbs_impl {

enum class GpuDirect { None, Dmabuf, Peermem };

struct GpuDirectProbe {
  GpuDirect path = GpuDirect::None;
  std::string detail;  // what was found: for the refusal's message and rdmakit-info's logs
};

struct GpuDirectInputs {
  // The errno of ibv_reg_dmabuf_mr(pd, 0, 0, 0, fd -1, 0), ENOSYS when libibverbs lacks the function.
  std::function<int()> nic_dmabuf_errno;
  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of `device`; nullopt where the CUDA driver cannot be asked.
  std::function<std::optional<int>(int device)> driver_dmabuf;
  std::string sysfs_root;  // prefixed to /sys/...: "" is the real one (tests point it at a directory)
};

GpuDirectProbe probe_gpudirect(const GpuDirectInputs& inputs, int device);

// The error for a device region that grants a remote right without GPUDirect: one-sided access to device
// memory needs the NIC to reach it. NotSupported, naming the missing drivers and what works instead.
Error remote_device_memory_refused(const GpuDirectProbe& probe, int device, Access access);

}  // namespace rdmakit::verbs_impl
