#include "rdmakit/context.hpp"

#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "core/identity.hpp"
#include "core/log.hpp"
#include "core/option_table.hpp"
#include "core/transport_registry.hpp"
#include "cuda/runtime.hpp"
#include "transport/provider.hpp"

namespace rdmakit {
namespace {

// Memory that allocate() owns: an anonymous mapping, unmapped when the region goes.
class OwnedRegion final : public detail::MemoryRegionProvider {
 public:
  OwnedRegion(std::shared_ptr<MemoryRegion> registration, void* memory, std::size_t mapped)
      : MemoryRegionProvider(registration->data(), registration->size(), registration->access(),
                             registration->lkey(), registration->rkey(), registration->descriptor().owner_id,
                             registration->descriptor().owner_epoch),
        memory_(memory),
        mapped_(mapped),
        registration_(std::move(registration)) {
    set_placement(registration_->kind(), registration_->device(), registration_->path());
  }
  ~OwnedRegion() override {
    registration_.reset();  // deregister before the memory goes
    munmap(memory_, mapped_);
  }

 private:
  void* memory_;
  std::size_t mapped_;
  std::shared_ptr<MemoryRegion> registration_;
};

// Device memory that allocate(..., MemoryKind::Cuda) owns: cudaFree'd when the region goes.
class OwnedDeviceRegion final : public detail::MemoryRegionProvider {
 public:
  OwnedDeviceRegion(std::shared_ptr<MemoryRegion> registration, const detail::cuda::Runtime& rt, int device)
      : MemoryRegionProvider(registration->data(), registration->size(), registration->access(),
                             registration->lkey(), registration->rkey(), registration->descriptor().owner_id,
                             registration->descriptor().owner_epoch),
        rt_(rt),
        allocation_device_(device),
        registration_(std::move(registration)) {
    set_placement(registration_->kind(), registration_->device(), registration_->path());
  }
  ~OwnedDeviceRegion() override {
    void* memory = registration_->data();
    registration_.reset();  // deregister (and close peers' IPC mappings) before the memory goes
    (void)detail::cuda::on_device(rt_, allocation_device_, [&]() -> Result<void> {
      rt_.free(memory);
      return {};
    });
  }

 private:
  const detail::cuda::Runtime& rt_;
  int allocation_device_;
  std::shared_ptr<MemoryRegion> registration_;
};

Result<std::shared_ptr<MemoryRegion>> allocate_device(detail::ContextProvider& context, std::size_t size,
                                                      Access access) {
  auto rt = detail::cuda::Runtime::get();
  if (!rt) return fail(rt.error().code(), "allocate (MemoryKind::Cuda): " + rt.error().message());
  int device = 0;
  if (auto e = (*rt)->get_device(&device); e != detail::cuda::kSuccess)
    return fail(Errc::Unavailable, "allocate (MemoryKind::Cuda): " + (*rt)->describe("cudaGetDevice", e));
  void* memory = nullptr;
  if (auto e = (*rt)->malloc(&memory, size); e != detail::cuda::kSuccess)
    return fail(Errc::ResourceExhausted, "allocate (MemoryKind::Cuda): " + std::to_string(size) +
                                             " bytes on device " + std::to_string(device) + ": " +
                                             (*rt)->describe("cudaMalloc", e));
  auto registration = context.Context::register_memory(memory, size, access, MemoryKind::Cuda);
  if (!registration) {
    (*rt)->free(memory);
    return std::unexpected(registration.error());
  }
  return std::make_shared<OwnedDeviceRegion>(std::move(*registration), **rt, device);
}

// Out of memory is a limit reached, not a broken system: ResourceExhausted, naming the address-space limit
// when one is set (the usual cause of ENOMEM from mmap with memory to spare).
std::unexpected<Error> allocation_failed(std::size_t size, int sys_errno) {
  std::string what = "allocate: mmap of " + std::to_string(size) + " bytes";
  if (sys_errno != ENOMEM) return fail_errno(what, sys_errno);
  what += ": out of memory (ENOMEM)";
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    what += "; the address-space limit RLIMIT_AS is " + std::to_string(limit.rlim_cur >> 20) + " MiB";
  else
    what += "; no address-space limit (RLIMIT_AS) is set: the system's memory or vm.max_map_count";
  return std::unexpected(Error(Errc::ResourceExhausted, std::move(what), sys_errno));
}

}  // namespace

namespace detail {

ContextProvider::ContextProvider(Config config) : config_(std::move(config)) {
  identity_.name = config_.name;
  identity_.id = identity::hash_name(config_.name);
  identity_.epoch = identity::new_epoch();
}

Result<std::shared_ptr<MemoryRegion>> ContextProvider::register_device_memory(
    void*, std::size_t, Access, const cuda::PointerInfo& device) {
  return fail(Errc::NotSupported, "register_memory: CUDA device memory (device " +
                                      std::to_string(device.device) + ") has no path over the " +
                                      std::string(transport()) +
                                      " transport yet (docs/gpu.md lists the paths of each transport)");
}

}  // namespace detail

Result<std::shared_ptr<Context>> Context::open(const Options& options) {
  options::SetOptions set;
  auto config = options::resolve_config(options, set);
  if (!config) return std::unexpected(config.error());
  // The log level is the process's (the sink is too): a context changes it only when its log_level was set
  // (Options::log_level or RDMAKIT_LOG_LEVEL), so a context opened with the defaults leaves what the program
  // chose with set_log_level() as it is. Among contexts that set it, the last one opened wins.
  LogLevel level;
  if (set.contains("log_level") && log::parse_level(config->log_level, level)) set_log_level(level);
  return transport::open(*config);
}

Result<std::shared_ptr<MemoryRegion>> detail::ContextProvider::allocate(std::size_t size, Access access) {
  if (size == 0) return fail(Errc::InvalidArgument, "allocate: size is 0");
  void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return allocation_failed(size, errno);
  auto registration = register_memory(memory, size, access);
  if (!registration) {
    munmap(memory, size);
    return std::unexpected(registration.error());
  }
  return std::make_shared<OwnedRegion>(std::move(*registration), memory, size);
}

// The facades.
Context::~Context() = default;
const Config& Context::config() const noexcept { return detail::provider(*this).config(); }
PeerInfo Context::identity() const { return detail::provider(*this).identity(); }
std::string_view Context::transport() const noexcept { return detail::provider(*this).transport(); }
Capabilities Context::capabilities() const { return detail::provider(*this).capabilities(); }
Result<std::shared_ptr<MemoryRegion>> Context::register_memory(void* data, std::size_t size, Access access) {
  return register_memory(data, size, access, MemoryKind::Auto);
}
Result<std::shared_ptr<MemoryRegion>> Context::register_memory(void* data, std::size_t size, Access access,
                                                               MemoryKind kind) {
  auto& self = detail::provider(*this);
  if (kind == MemoryKind::Host) return self.register_memory(data, size, access);
  auto where = detail::cuda::classify(data, size, kind, "register_memory");
  if (!where) return std::unexpected(where.error());
  if (where->kind == MemoryKind::Host) return self.register_memory(data, size, access);
  auto region = self.register_device_memory(data, size, access, *where);
  if (!region) return region;
  // Option gpu_path: a path other than the one required is refused (the region deregisters as it goes).
  const std::string& required = config().gpu_path;
  const bool direct = (*region)->path() != MemoryPath::Staged;
  if (required == "auto" || (required == "direct") == direct) return region;
  return fail(Errc::NotSupported,
              "register_memory: option gpu_path=" + required + " (RDMAKIT_GPU_PATH), but the " +
                  std::string(transport()) + " transport moves this device memory " +
                  (direct ? "directly (" + to_string((*region)->path()) + ") and has no staged path"
                          : "only staged through host memory: no GPUDirect RDMA or CUDA IPC path here"));
}
Result<std::shared_ptr<MemoryRegion>> Context::allocate(std::size_t size, Access access) {
  return detail::provider(*this).allocate(size, access);
}
Result<std::shared_ptr<MemoryRegion>> Context::allocate(std::size_t size, Access access, MemoryKind kind) {
  if (kind != MemoryKind::Cuda) return allocate(size, access);  // Auto: rdmakit's own memory is host memory
  if (size == 0) return fail(Errc::InvalidArgument, "allocate: size is 0");
  return allocate_device(detail::provider(*this), size, access);
}
Result<std::shared_ptr<CompletionQueue>> Context::create_cq(std::size_t depth) {
  return detail::provider(*this).create_cq(depth);
}
Result<std::shared_ptr<Listener>> Context::listen(std::string_view address) {
  return detail::provider(*this).listen(address);
}
Result<std::shared_ptr<Connection>> Context::connect(std::string_view address,
                                                     const ConnectOptions& options) {
  return detail::provider(*this).connect(address, options);
}
std::vector<ConnectionStats> Context::diagnostics() const { return detail::provider(*this).diagnostics(); }
std::size_t Context::live_registrations() const { return detail::provider(*this).live_registrations(); }

Listener::~Listener() = default;
std::string Listener::address() const { return detail::provider(*this).address(); }
Result<std::shared_ptr<Connection>> Listener::accept(std::chrono::milliseconds timeout,
                                                     const ConnectOptions& options) {
  return detail::provider(*this).accept(timeout, options);
}

namespace identity {

std::uint64_t hash_name(std::string_view name) noexcept {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

std::uint64_t new_epoch() noexcept {
  std::uint64_t epoch = 0;
  while (epoch == 0) {
    if (getrandom(&epoch, sizeof(epoch), 0) != sizeof(epoch))
      epoch = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return epoch;
}

}  // namespace identity
}  // namespace rdmakit
