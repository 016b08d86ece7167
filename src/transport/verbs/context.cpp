#include "transport/verbs/context.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "core/soft_region.hpp"
#include "cuda/driver.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/connection.hpp"

namespace rdmakit::verbs_impl {
namespace {

// A registered range, possibly sharing its ibv_mr with other regions through the cache.
class VerbsMemoryRegion final : public detail::MemoryRegionProvider {
 public:
  VerbsMemoryRegion(std::shared_ptr<VerbsContext> context, const RegistrationCache::Entry* entry, void* data,
                    std::size_t size, Access access)
      : MemoryRegionProvider(data, size, access, entry->lkey, entry->rkey, context->identity().id,
                             context->identity().epoch),
        context_(std::move(context)),
        entry_(entry) {}
  ~VerbsMemoryRegion() override { context_->release(entry_); }

 private:
  std::shared_ptr<VerbsContext> context_;
  const RegistrationCache::Entry* entry_;
};

// Device memory the NIC reaches (GPUDirect): its own ibv_mr, outside the registration cache (whose ranges are
// host memory).
class VerbsDeviceRegion final : public detail::MemoryRegionProvider {
 public:
  VerbsDeviceRegion(std::shared_ptr<VerbsContext> context, ibv_mr* mr, void* data, std::size_t size,
                    Access access, int device, MemoryPath path)
      : MemoryRegionProvider(data, size, access, mr->lkey, mr->rkey, context->identity().id,
                             context->identity().epoch),
        context_(std::move(context)),
        mr_(mr) {
    set_placement(MemoryKind::Cuda, device, path);
  }
  ~VerbsDeviceRegion() override { context_->device()->api().dereg_mr(mr_); }

 private:
  std::shared_ptr<VerbsContext> context_;
  ibv_mr* mr_;
};

// Device memory without GPUDirect: local access only, staged through the context's bounce buffers. Its keys
// are 0: no work request carries them to the NIC (the datapath swaps in the bounce buffer's).
class VerbsStagedRegion final : public detail::MemoryRegionProvider {
 public:
  VerbsStagedRegion(std::shared_ptr<VerbsContext> context, void* data, std::size_t size, Access access,
                    int device)
      : MemoryRegionProvider(data, size, access, 0, 0, context->identity().id, context->identity().epoch),
        context_(std::move(context)) {
    set_placement(MemoryKind::Cuda, device, MemoryPath::Staged);
    context_->staging().add_range(reinterpret_cast<std::uint64_t>(data), size, device, access);
  }
  ~VerbsStagedRegion() override {
    context_->staging().remove_range(reinterpret_cast<std::uint64_t>(data()), size());
  }

 private:
  std::shared_ptr<VerbsContext> context_;
};

constexpr Access kRemoteRights = Access::RemoteRead | Access::RemoteWrite | Access::RemoteAtomic;

std::unexpected<Error> registration_failed(const std::string& call, std::size_t size, Access access,
                                           int err) {
  return std::unexpected(Error(err == ENOMEM || err == EAGAIN ? Errc::ResourceExhausted : Errc::SystemError,
                               call + "(" + std::to_string(size) + " bytes, " + to_string(access) +
                                   "): " + std::strerror(err) +
                                   (err == ENOMEM ? " (locked-memory limit? see ulimit -l)" : ""),
                               err));
}

}  // namespace

VerbsContext::VerbsContext(Config config, VerbsOptions options, std::shared_ptr<Device> device,
                           std::shared_ptr<CmMonitor> monitor)
    : ContextProvider(std::move(config)),
      options_(std::move(options)),
      device_(std::move(device)),
      monitor_(std::move(monitor)),
      async_events_(std::make_shared<AsyncEvents>(device_)),
      cache_(options_.registration_cache),
      staging_(std::make_shared<Staging>(device_, options_.staging_chunk)) {
  if (!async_events_->available()) return;
  // Non-blocking, so that the handler can take every pending event and stop.
  int flags = fcntl(async_events_->fd(), F_GETFL);
  if (flags >= 0 && fcntl(async_events_->fd(), F_SETFL, flags | O_NONBLOCK) == 0)
    monitor_->watch(async_events_->fd(), std::weak_ptr<AsyncEvents>(async_events_));
}

VerbsContext::~VerbsContext() {
  if (async_events_->available()) monitor_->unwatch(async_events_->fd());
}

Capabilities VerbsContext::capabilities() const {
  Capabilities c;
  c.one_sided_without_target_cpu = true;
  // IBV_ATOMIC_GLOB: the HCA's atomics are atomic against the CPU's too; IBV_ATOMIC_HCA only among HCAs.
  c.atomics_coherent_with_cpu = device_->attr().atomic_cap == IBV_ATOMIC_GLOB;
  c.kernel_bypass = true;
  c.flushes_receives_posted_in_error = true;  // in software where the device does not (rxe: flush_recv)
  c.device_keys = true;
  c.peer_death_announced = true;  // on_cm_readable: DISCONNECTED moves the QP to the error state
  c.max_message_size = device_->port_attr().max_msg_sz;
  c.max_sge = std::min<std::uint32_t>(config().max_sge, static_cast<std::uint32_t>(device_->attr().max_sge));
  c.max_inline = options_.inline_size;
  c.misaligned_atomic_refused_at_post = true;  // rxe and mlx5 refuse it in ibv_post_send (EINVAL)
  // Device 0's path. The probe asks the CUDA driver only where the NIC could use dmabuf: a program that
  // never uses a GPU loads no CUDA to answer this on a NIC without it.
  switch (const_cast<VerbsContext*>(this)->gpudirect(0).path) {
    case GpuDirect::Dmabuf:
      c.device_memory_path = to_string(MemoryPath::GpuDirectDmabuf);
      break;
    case GpuDirect::Peermem:
      c.device_memory_path = to_string(MemoryPath::GpuDirectPeermem);
      break;
    case GpuDirect::None:
      c.device_memory_path = to_string(MemoryPath::Staged);
      break;
  }
  return c;
}

GpuDirectProbe VerbsContext::gpudirect(int device) {
  std::lock_guard lock(gpudirect_mutex_);
  if (auto it = gpudirect_.find(device); it != gpudirect_.end()) return it->second;
  GpuDirectInputs inputs;
  inputs.nic_dmabuf_errno = [this] {
    const Api& api = device_->api();
    if (!api.reg_dmabuf_mr) return ENOSYS;
    errno = 0;
    // As UCX and NCCL probe it: fd -1 reaches the kernel's fdget (EBADF) only where the provider and the
    // kernel implement dmabuf registration; elsewhere EOPNOTSUPP (or ENOSYS) before any fd is looked at.
    if (ibv_mr* mr = api.reg_dmabuf_mr(device_->pd(), 0, 0, 0, -1, 0)) {
      api.dereg_mr(mr);  // no provider should accept it; if one does, it supports dmabuf
      return EBADF;
    }
    return errno == 0 ? EOPNOTSUPP : errno;
  };
  inputs.driver_dmabuf = [](int ordinal) -> std::optional<int> {
    auto driver = detail::cuda::Driver::get();
    if (!driver || !(*driver)->mem_get_handle_for_address_range) return std::nullopt;
    int value = 0;
    if ((*driver)->device_get_attribute(&value, detail::cuda::kDeviceDmaBufSupported, ordinal) !=
        detail::cuda::kDriverSuccess)
      return std::nullopt;
    return value;
  };
  // inputs.sysfs_root stays "": the real /sys (the probe's tests point it at a directory of their own).
  return gpudirect_[device] = probe_gpudirect(inputs, device);
}

Result<std::shared_ptr<MemoryRegion>> VerbsContext::register_device_memory(
    void* data, std::size_t size, Access access, const detail::cuda::PointerInfo& where) {
  if (auto ok = check_registration(data, size, access); !ok) return std::unexpected(ok.error());
  auto self = std::static_pointer_cast<VerbsContext>(shared_from_this());
  const GpuDirectProbe probe = gpudirect(where.device);
  const Api& api = device_->api();
  const auto addr = reinterpret_cast<std::uint64_t>(data);
  switch (probe.path) {
    case GpuDirect::Dmabuf: {
      auto driver = detail::cuda::Driver::get();
      if (!driver) return std::unexpected(driver.error());
      // One fd for the whole allocation, page-aligned as cuMemGetHandleForAddressRange requires: a caching
      // allocator's interior pointer is registered at its offset inside it.
      const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
      const std::uint64_t base = where.base & ~(page - 1);
      const std::uint64_t end = (where.base + where.allocation_size + page - 1) & ~(page - 1);
      int fd = -1;
      if (auto r = (*driver)->mem_get_handle_for_address_range(&fd, base, end - base,
                                                               detail::cuda::kRangeHandleDmaBufFd, 0);
          r != detail::cuda::kDriverSuccess)
        return fail(Errc::Unavailable,
                    "register_memory: dmabuf export of device memory for GPUDirect RDMA: " +
                        (*driver)->describe("cuMemGetHandleForAddressRange", r));
      ibv_mr* mr = api.reg_dmabuf_mr(device_->pd(), addr - base, size, addr, fd, map_access(access));
      const int err = errno;
      ::close(fd);  // the registration holds its own reference to the dmabuf
      if (!mr) return registration_failed("ibv_reg_dmabuf_mr", size, access, err);
      return std::make_shared<VerbsDeviceRegion>(std::move(self), mr, data, size, access, where.device,
                                                 MemoryPath::GpuDirectDmabuf);
    }
    case GpuDirect::Peermem: {
      ibv_mr* mr = api.reg_mr(device_->pd(), data, size, map_access(access));
      if (!mr) return registration_failed("ibv_reg_mr (device memory, nvidia_peermem)", size, access, errno);
      return std::make_shared<VerbsDeviceRegion>(std::move(self), mr, data, size, access, where.device,
                                                 MemoryPath::GpuDirectPeermem);
    }
    case GpuDirect::None:
      break;
  }
  if ((static_cast<std::uint32_t>(access) & static_cast<std::uint32_t>(kRemoteRights)) != 0)
    return std::unexpected(remote_device_memory_refused(probe, where.device, access));
  return std::make_shared<VerbsStagedRegion>(std::move(self), data, size, access, where.device);
}

Result<std::shared_ptr<MemoryRegion>> VerbsContext::register_memory(void* data, std::size_t size,
                                                                    Access access) {
  if (auto ok = check_registration(data, size, access); !ok) return std::unexpected(ok.error());
  auto self = std::static_pointer_cast<VerbsContext>(shared_from_this());
  const auto addr = reinterpret_cast<std::uint64_t>(data);
  if (const auto* hit = cache_.acquire(addr, size, access))
    return std::make_shared<VerbsMemoryRegion>(std::move(self), hit, data, size, access);
  const auto start = std::chrono::steady_clock::now();
  ibv_mr* mr = device_->api().reg_mr(device_->pd(), data, size, map_access(access));
  const auto took = std::chrono::steady_clock::now() - start;
  if (!mr) {
    int err = errno;
    return std::unexpected(Error(err == ENOMEM || err == EAGAIN ? Errc::ResourceExhausted : Errc::SystemError,
                                 "ibv_reg_mr(" + std::to_string(size) + " bytes, " + to_string(access) +
                                     "): " + std::strerror(err) +
                                     (err == ENOMEM ? " (locked-memory limit? see ulimit -l)" : ""),
                                 err));
  }
  const auto* entry = cache_.insert(addr, size, access, mr, mr->lkey, mr->rkey, took);
  return std::make_shared<VerbsMemoryRegion>(std::move(self), entry, data, size, access);
}

void VerbsContext::release(const RegistrationCache::Entry* entry) {
  if (void* handle = cache_.release(entry)) device_->api().dereg_mr(static_cast<ibv_mr*>(handle));
}

Result<std::shared_ptr<CompletionQueue>> VerbsContext::create_cq(std::size_t depth) {
  auto cq =
      VerbsCompletionQueue::create(device_, depth ? static_cast<std::uint32_t>(depth) : config().cq_depth,
                                   config().wait_mode, config().spin);
  if (!cq) return std::unexpected(cq.error());
  return std::shared_ptr<CompletionQueue>(std::move(*cq));
}

Result<std::pair<std::shared_ptr<VerbsCompletionQueue>, std::shared_ptr<VerbsCompletionQueue>>>
VerbsContext::cqs_for(const ConnectOptions& options) {
  auto pick = [&](const std::shared_ptr<CompletionQueue>& given,
                  std::uint32_t depth) -> Result<std::shared_ptr<VerbsCompletionQueue>> {
    if (!given) return VerbsCompletionQueue::create(device_, depth, config().wait_mode, config().spin);
    auto verbs = std::dynamic_pointer_cast<VerbsCompletionQueue>(given);
    if (!verbs)
      return fail(Errc::InvalidArgument, "connect: the completion queue was not made by this verbs context");
    return verbs;
  };
  auto send = pick(options.send_cq, config().send_queue_depth);
  if (!send) return std::unexpected(send.error());
  auto recv = pick(options.recv_cq, config().recv_queue_depth);
  if (!recv) return std::unexpected(recv.error());
  return std::pair{*send, *recv};
}

Result<std::shared_ptr<Listener>> VerbsContext::listen(std::string_view address) {
  return listen_verbs(std::static_pointer_cast<VerbsContext>(shared_from_this()),
                      address.empty() ? std::string_view(config().listen_address) : address);
}

Result<std::shared_ptr<Connection>> VerbsContext::connect(std::string_view address,
                                                          const ConnectOptions& options) {
  return connect_verbs(std::static_pointer_cast<VerbsContext>(shared_from_this()), address, options);
}

void VerbsContext::track(const std::shared_ptr<VerbsConnection>& connection) {
  std::lock_guard lock(connections_mutex_);
  std::erase_if(connections_, [](const std::weak_ptr<VerbsConnection>& c) { return c.expired(); });
  connections_.push_back(connection);
  monitor_->watch(connection->cm_fd(), std::weak_ptr<VerbsConnection>(connection));
}

std::vector<ConnectionStats> VerbsContext::diagnostics() const {
  std::vector<ConnectionStats> out;
  std::lock_guard lock(connections_mutex_);
  for (const auto& weak : connections_)
    if (auto c = weak.lock()) out.push_back(c->stats());
  return out;
}

std::uint32_t VerbsContext::device_ipv4() const noexcept { return ipv4_of(device_->gid().gid).value_or(0); }

}  // namespace rdmakit::verbs_impl

namespace rdmakit::transport {

namespace {
Result<std::shared_ptr<Context>> open_verbs(const Config& config) {
  auto options = verbs_impl::resolve_verbs_options(config);
  if (!options) return std::unexpected(options.error());
  auto api = verbs_impl::load_api();
  if (!api) return std::unexpected(api.error());
  auto device = verbs_impl::Device::open(**api, *options);
  if (!device) return std::unexpected(device.error());
  auto monitor = verbs_impl::CmMonitor::start();
  if (!monitor) return std::unexpected(monitor.error());
  return std::shared_ptr<Context>(std::make_shared<verbs_impl::VerbsContext>(
      config, std::move(*options), std::move(*device), std::move(*monitor)));
}
}  // namespace

Registration verbs_registration() {
  return {.name = "verbs",
          .summary = "libibverbs + librdmacm (loaded at run time): InfiniBand, RoCE, iWARP, Soft-RoCE",
          .picks_device = true,
          .options = &verbs_impl::verbs_option_table(),
          .open = open_verbs};
}

}  // namespace rdmakit::transport
