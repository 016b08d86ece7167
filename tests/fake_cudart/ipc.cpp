// CUDA IPC across real processes: a handle names the exporter's memfd (pid and fd number), which the
// importer opens through /proc/<pid>/fd and maps as device memory of its own, so both share the bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "fake_cudart/state.hpp"

using namespace fake_cudart;

namespace {

constexpr std::uint64_t kMagic = 0x4b4146454950430aULL;  // "FAKEIPC\n" backwards, never zero

// The 64 bytes of cudaIpcMemHandle_t as the fake fills them.
struct Handle {
  std::uint64_t magic;
  std::int32_t pid;
  std::int32_t fd;
  std::uint64_t size;    // as requested at cudaMalloc
  std::uint64_t mapped;  // the memfd's size
  std::uint64_t id;      // the allocation's random id, also in the memfd's name
  std::int32_t device;
  std::uint8_t unused[20];
};
static_assert(sizeof(Handle) == 64);

// The memfd behind `fd` is the allocation the handle names: its name carries the id and its size matches.
bool is_named_memfd(int fd, const Handle& h) {
  char link[64], expected[96], target[128] = {};
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  std::snprintf(expected, sizeof expected, "/memfd:fake-cuda-device-%016llx (deleted)",
                static_cast<unsigned long long>(h.id));
  ssize_t n = ::readlink(link, target, sizeof target - 1);
  struct stat st {};
  return n > 0 && std::strcmp(target, expected) == 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<std::uint64_t>(st.st_size) == h.mapped;
}

bool plausible(const Handle& h) {
  std::size_t page = page_size();
  return h.magic == kMagic && h.pid > 0 && h.fd >= 0 && h.size > 0 && h.mapped >= h.size &&
         h.mapped % page == 0 && h.mapped - h.size < page;
}

Allocation* find_opened(const Handle& h) {
  for (auto& [base, a] : state().allocations)
    if (a.kind == Kind::Ipc && a.ipc_pid == h.pid && a.id == h.id) return &a;
  return nullptr;
}

}  // namespace

extern "C" {

struct cudaIpcMemHandle_t {
  char reserved[64];  // CUDA_IPC_HANDLE_SIZE
};

// Any pointer inside a cudaMalloc allocation names the whole allocation (the runtime's documentation asks
// for the base; the real runtime accepts interior pointers, and caching allocators rely on it).
int cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* pointer) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  const Allocation* a = find_allocation(pointer, 0);
  if (!handle || !a || a->kind != Kind::Device) return kInvalidValue;
  Handle h{.magic = kMagic,
           .pid = static_cast<std::int32_t>(::getpid()),
           .fd = a->fd,
           .size = a->size,
           .mapped = a->mapped,
           .id = a->id,
           .device = a->device,
           .unused = {}};
  std::memcpy(handle, &h, sizeof h);
  return kSuccess;
}

// Error codes: a handle of this very process is cudaErrorDeviceUninitialized (201, "invalid device
// context"), what the real runtime answers then; one that does not decode, or whose memory is gone (the
// process exited, the fd was closed or reused), is cudaErrorInvalidResourceHandle (400).
int cudaIpcOpenMemHandle(void** pointer, cudaIpcMemHandle_t handle, unsigned flags) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  // cudaIpcMemLazyEnablePeerAccess (1) is what the runtime documents; 0 is accepted as it is in practice.
  if (!pointer || flags > 1) return kInvalidValue;
  Handle h;
  std::memcpy(&h, &handle, sizeof h);
  if (!plausible(h)) return kInvalidResourceHandle;
  if (h.pid == ::getpid()) return kDeviceUninitialized;
  if (Allocation* a = find_opened(h)) {  // opened before: the same mapping, one more reference
    ++a->ipc_refs;
    *pointer = reinterpret_cast<void*>(a->base);
    return kSuccess;
  }
  std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return kInvalidResourceHandle;
  if (!is_named_memfd(fd, h)) {
    ::close(fd);
    return kInvalidResourceHandle;
  }
  Allocation a{
      .size = h.size, .mapped = h.mapped, .fd = fd, .device = h.device, .kind = Kind::Ipc, .id = h.id};
  if (map_device(a) != kSuccess) {
    ::close(fd);
    return kMapBufferObjectFailed;
  }
  a.buffer_id = state().next_buffer_id++;
  a.ipc_pid = h.pid;
  a.ipc_refs = 1;
  state().allocations.emplace(a.base, a);
  ++state().stats.ipc_open_alive;
  *pointer = reinterpret_cast<void*>(a.base);
  return kSuccess;
}

int cudaIpcCloseMemHandle(void* pointer) {
  std::lock_guard lock(state().mutex);
  if (int e = injected(__func__)) return e;
  auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == state().allocations.end() || it->second.kind != Kind::Ipc) return kInvalidValue;
  if (--it->second.ipc_refs > 0) return kSuccess;
  run_all();  // no queued copy may still use the mapping
  unmap(it->second);
  state().allocations.erase(it);
  --state().stats.ipc_open_alive;
  return kSuccess;
}

}  // extern "C"
