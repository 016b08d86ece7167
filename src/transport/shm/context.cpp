// Context lifecycle, registration and completion queues of the shm transport.
#include "transport/shm/context.hpp"

#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/log.hpp"
#include "cuda/pointer.hpp"
#include "cuda/runtime.hpp"
#include "transport/shm/connection.hpp"
#include "transport/shm/options.hpp"

namespace rdmakit::shm {
namespace {

// A region of this context. Deregistration revokes the key in the shared table first, so no initiator
// reaches the memory afterwards; allocate()'d memory then goes back to its arena (its pages zeroed).
class ShmRegion final : public detail::MemoryRegionProvider {
 public:
  ShmRegion(std::shared_ptr<ShmContext> context, void* data, std::size_t size, Access access,
            Registry::Keys keys, Arena* arena)
      : MemoryRegionProvider(data, size, access, keys.lkey, keys.rkey, context->identity().id,
                             context->identity().epoch),
        context_(std::move(context)),
        arena_(arena) {}
  void place(MemoryKind kind, int device, MemoryPath path) noexcept { set_placement(kind, device, path); }
  ~ShmRegion() override {
    context_->deregister(rkey());  // the key peers pin
    if (arena_) arena_->free(data(), size());
  }

 private:
  std::shared_ptr<ShmContext> context_;
  Arena* arena_;  // the arena the memory came from (allocate), or null (register_memory)
};

// Completions of one-sided operations are pushed by the posting thread; receive completions by whoever
// runs progress: a spinning poller does it itself (no system call, no thread hop), a sleeping waiter
// relies on the progress thread, which sleeps on the doorbell eventfd.
class ShmCq final : public SoftCompletionQueue {
 public:
  ShmCq(std::weak_ptr<Context> context, WaitMode mode, std::chrono::microseconds spin, std::size_t depth)
      : SoftCompletionQueue(mode, spin, depth), context_(std::move(context)) {}

 protected:
  void progress() override {
    if (auto context = context_.lock()) {
      auto& shm = static_cast<ShmContext&>(*context);
      shm.note_polling();
      shm.progress_all(false);
    }
  }
  Result<void> sleep_until(std::chrono::steady_clock::time_point deadline) override {
    if (auto context = context_.lock()) static_cast<ShmContext&>(*context).end_polling();
    return SoftCompletionQueue::sleep_until(deadline);
  }

 private:
  std::weak_ptr<Context> context_;
};

}  // namespace

ShmContext::ShmContext(Config config) : ContextProvider(std::move(config)) {}

Result<std::shared_ptr<ShmContext>> ShmContext::create(const Config& config) {
  std::shared_ptr<ShmContext> context(new ShmContext(config));
  if (auto ok = context->init(); !ok) return std::unexpected(ok.error());
  return context;
}

Result<void> ShmContext::init() {
  auto options = resolve_shm_options(config());
  if (!options) return std::unexpected(options.error());
  auto uids = parse_uid_list(options->allowed_uids);
  if (!uids) return std::unexpected(uids.error());
  allowed_uids_ = std::move(*uids);
  auto fd = create_memfd("rdmakit-shm-control", sizeof(ControlSegment));
  if (!fd) return std::unexpected(fd.error());
  auto mapping = map_shared(fd->get(), sizeof(ControlSegment), true);
  if (!mapping) return std::unexpected(mapping.error());
  // Our mapping stays writable; peers get the descriptor and can only ever map it read-only.
  if (auto sealed = seal_memfd(fd->get(), "rdmakit-shm-control", true); !sealed)
    return std::unexpected(sealed.error());
  // Every peer context maps our writable and read-only arenas, so their sizes add up per peer: the
  // read-only and private arenas are kept small (RemoteRead-only and local-only allocate() memory is
  // rare) so that many contexts in one process (threads as ranks, ThreadSanitizer's smaller address
  // space) stay within the address-space budget the single 32 GiB arena used to take
  // (8 thread ranks: 56 peer views of 24 + 4 GiB and 8 x 32 GiB of our own, 1.8 TiB; 32 + 32 GiB failed under
  // TSan).
  auto rw = Arena::create(Arena::kDefaultSize, Arena::Sharing::Writable);
  if (!rw) return std::unexpected(rw.error());
  auto ro = Arena::create(Arena::kSmallSize, Arena::Sharing::ReadOnly);
  if (!ro) return std::unexpected(ro.error());
  auto mine = Arena::create(Arena::kSmallSize, Arena::Sharing::Private);
  if (!mine) return std::unexpected(mine.error());
  doorbell_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!doorbell_) return fail_errno("shm: eventfd", errno);
  control_fd_ = std::move(*fd);
  control_ = std::move(*mapping);
  rw_arena_.emplace(std::move(*rw));
  ro_arena_.emplace(std::move(*ro));
  private_arena_.emplace(std::move(*mine));
  auto* control = control_.as<ControlSegment>();
  control->magic = kControlMagic;
  control->version = kVersion;
  control->slots = kSlots;
  control->pid = ::getpid();
  control->epoch = identity().epoch;
  registry_.emplace(control);
  progress_ = std::thread([this] { run_progress(); });
  return {};
}

ShmContext::~ShmContext() {
  stop_.store(true, std::memory_order_release);
  eventfd_write(doorbell_.get(), 1);
  if (progress_.joinable()) progress_.join();
}

Capabilities ShmContext::capabilities() const {
  return Capabilities{
      .one_sided_without_target_cpu = true,
      .atomics_coherent_with_cpu = true,
      .kernel_bypass = false,  // mapped memory bypasses the kernel, cross-memory attach does not
      .max_message_size = std::uint64_t{1} << 31,
      .max_sge = max_sge(),
      .max_inline = 0,
      .misaligned_atomic_refused_at_post = false,  // completes RemoteInvalidRequest
      .address_prefix = "shm:",
      .same_host_only = true,
      .progress_threads = 1,
      .device_memory_path = "cuda-ipc",
      // 2-8 ranks on one host, on the 2-core CI machine (docs/allreduce-model.md).
      .message_cost_us = 3.2,
      .bandwidth_bytes_per_us = 2290};
}

std::uint32_t ShmContext::max_sge() const noexcept { return std::min(config().max_sge, kMaxSge); }

Result<std::shared_ptr<MemoryRegion>> ShmContext::register_memory(void* data, std::size_t size,
                                                                  Access access) {
  return register_region(data, size, access, nullptr);
}

Arena& ShmContext::arena_for(Access access) noexcept {
  if (has(access, Access::RemoteWrite) || has(access, Access::RemoteAtomic)) return *rw_arena_;
  if (has(access, Access::RemoteRead)) return *ro_arena_;
  return *private_arena_;
}

// The owner's side of cuda-ipc: the CUDA IPC handle of the whole allocation (IPC exports allocations, and
// caching allocators register interior ranges of them), published beside the registration for initiators
// to open. A region with no remote right keeps the handle private: only a receive posted in it hands it to
// the one peer that fills it (inbound.cpp).
Result<std::shared_ptr<MemoryRegion>> ShmContext::register_device_memory(
    void* data, std::size_t size, Access access, const detail::cuda::PointerInfo& info) {
  namespace cuda = detail::cuda;
  auto rt = cuda::Runtime::get();
  if (!rt) return std::unexpected(rt.error());
  DeviceRef device{.base = info.base,
                   .size = info.allocation_size,
                   .flags = kDeviceMemory,
                   .device = info.device,
                   .handle = {}};
  cuda::IpcMemHandle handle{};
  auto got = cuda::on_device(**rt, info.device, [&]() -> Result<void> {
    if (auto e = (*rt)->ipc_get_mem_handle(&handle, reinterpret_cast<void*>(info.base)); e != cuda::kSuccess)
      return fail(Errc::NotSupported, (*rt)->describe("cudaIpcGetMemHandle", e));
    return {};
  });
  if (got) {
    std::memcpy(device.handle, &handle, sizeof(handle));
    device.flags |= kDeviceHandle;
  } else if (has(access, Access::RemoteRead) || has(access, Access::RemoteWrite) ||
             has(access, Access::RemoteAtomic)) {
    // Without a handle no other process can reach it: refuse rather than register what cannot work.
    return fail(Errc::NotSupported,
                "register_memory: device memory for remote access over the shm transport "
                "needs a CUDA IPC handle of its allocation (cudaMalloc memory): " +
                    got.error().message());
  }
  auto region = register_region(data, size, access, nullptr, &device);
  if (!region) return region;
  static_cast<ShmRegion&>(**region).place(MemoryKind::Cuda, info.device, MemoryPath::CudaIpc);
  return region;
}

Result<std::shared_ptr<MemoryRegion>> ShmContext::register_region(void* data, std::size_t size, Access access,
                                                                  Arena* arena, const DeviceRef* device) {
  if (data == nullptr) return fail(Errc::InvalidArgument, "register_memory: buffer is null");
  if (size == 0) return fail(Errc::InvalidArgument, "register_memory: size is 0");
  if (static_cast<std::uint32_t>(access) & ~static_cast<std::uint32_t>(Access::All))
    return fail(Errc::InvalidArgument, "register_memory: unknown access bits");
  if ((has(access, Access::RemoteWrite) || has(access, Access::RemoteAtomic)) &&
      !has(access, Access::LocalWrite))
    return fail(Errc::InvalidArgument,
                "register_memory: RemoteWrite and RemoteAtomic need LocalWrite too (as in verbs), got " +
                    to_string(access));
  auto start = reinterpret_cast<std::uintptr_t>(data);
  if (start + size < start) return fail(Errc::InvalidArgument, "register_memory: range wraps around");
  auto key = registry_->add(start, size, access, device);
  if (!key) return std::unexpected(key.error());
  return std::make_shared<ShmRegion>(std::static_pointer_cast<ShmContext>(shared_from_this()), data, size,
                                     access, *key, arena);
}

// The fast path: memory in an arena that every peer has mapped, so WRITE/READ are a memcpy and atomics a
// CPU atomic in the initiator, with no system call. Which arena follows the remote rights: a peer can map
// remote-writable memory read-write, RemoteRead-only memory read-only, and the rest not at all.
Result<std::shared_ptr<MemoryRegion>> ShmContext::allocate(std::size_t size, Access access) {
  if (size == 0) return fail(Errc::InvalidArgument, "allocate: size is 0");
  Arena& arena = arena_for(access);
  auto memory = arena.allocate(size);
  if (!memory) return std::unexpected(memory.error());
  auto region = register_region(*memory, size, access, &arena);
  if (!region) arena.free(*memory, size);
  return region;
}

Result<std::shared_ptr<CompletionQueue>> ShmContext::create_cq(std::size_t depth) {
  return std::make_shared<ShmCq>(weak_from_this(), config().wait_mode, config().spin,
                                 depth ? depth : config().cq_depth);
}

Result<std::shared_ptr<SoftCompletionQueue>> ShmContext::pick_cq(
    const std::shared_ptr<CompletionQueue>& given, std::uint32_t depth) {
  // A connection's own queue holds what its queue can have outstanding, as on verbs.
  if (!given) return std::make_shared<ShmCq>(weak_from_this(), config().wait_mode, config().spin, depth);
  auto soft = std::dynamic_pointer_cast<SoftCompletionQueue>(given);
  if (!soft) return fail(Errc::InvalidArgument, "connect: the completion queue belongs to another transport");
  return soft;
}

std::vector<ConnectionStats> ShmContext::diagnostics() const {
  std::lock_guard lock(connections_mutex_);
  std::vector<ConnectionStats> all;
  for (ShmConnection* connection : connections_) all.push_back(connection->stats());
  return all;
}

void ShmContext::detach(ShmConnection* connection) {
  std::lock_guard lock(connections_mutex_);
  std::erase(connections_, connection);
}

void ShmContext::deregister(std::uint32_t key) {
  registry_->revoke(key);
  // Taking the connections mutex also waits for a progress round that may be serving an atomic on it.
  auto deadline = Clock::now() + config().timeout;
  for (;;) {
    bool held;
    {
      std::lock_guard lock(connections_mutex_);
      held = std::any_of(connections_.begin(), connections_.end(), [&](auto* c) { return c->pins(key); });
    }
    if (!held) break;
    if (Clock::now() >= deadline) {
      log::warn("shm", "deregistration: a peer kept key " + std::to_string(key) + " pinned past the timeout");
      break;
    }
    std::this_thread::yield();
  }
  registry_->release(key);
}

}  // namespace rdmakit::shm
