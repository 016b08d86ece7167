// The CUDA runtime (libcudart), loaded with dlopen the first time device memory is met: nothing links CUDA,
// a build without the toolkit compiles this, and a process without a GPU pays nothing until a region or a
// buffer is device memory. One loader for the whole library (regions, transports, the checkpoint engine).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cuda/api.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::detail::cuda {

// A loaded runtime. The library stays loaded for the life of the process (unloading libcudart while the
// driver holds its state is not safe), so the object lives as long and callers keep a plain pointer.
class Runtime {
 public:
  // The runtime named `library` (a file name or path for dlopen); empty: $RDMAKIT_CUDA_RUNTIME, else
  // libcudart.so.13, .12, .11.0 and libcudart.so. Loaded once per name. Fails with Errc::Unavailable when no
  // library loads ("no CUDA runtime could be loaded", naming what was tried), a symbol is missing ("lacks
  // CUDA runtime symbols"), or the runtime sees no device now (asked on every call: a device can go away).
  static Result<const Runtime*> get(const std::string& library = {});

  const std::string& library() const noexcept { return library_; }
  // "cudaMemcpyAsync: <the runtime's text> (error N, runtime <library>)".
  std::string describe(const char* call, Error error) const;

  Error (*get_device_count)(int*) = nullptr;
  Error (*get_device)(int*) = nullptr;
  Error (*set_device)(int) = nullptr;
  Error (*pointer_get_attributes)(PointerAttributes*, const void*) = nullptr;
  Error (*stream_create_with_flags)(Stream*, unsigned) = nullptr;
  Error (*stream_destroy)(Stream) = nullptr;
  Error (*stream_synchronize)(Stream) = nullptr;
  Error (*memcpy_async)(void*, const void*, std::size_t, int, Stream) = nullptr;
  Error (*memcpy)(void*, const void*, std::size_t, int) = nullptr;
  Error (*host_register)(void*, std::size_t, unsigned) = nullptr;
  Error (*host_unregister)(void*) = nullptr;
  Error (*malloc)(void**, std::size_t) = nullptr;
  Error (*free)(void*) = nullptr;
  Error (*event_create_with_flags)(Event*, unsigned) = nullptr;
  Error (*event_record)(Event, Stream) = nullptr;
  Error (*event_query)(Event) = nullptr;
  Error (*event_synchronize)(Event) = nullptr;
  Error (*event_destroy)(Event) = nullptr;
  Error (*ipc_get_mem_handle)(IpcMemHandle*, void*) = nullptr;
  Error (*ipc_open_mem_handle)(void**, IpcMemHandle, unsigned) = nullptr;
  Error (*ipc_close_mem_handle)(void*) = nullptr;
  const char* (*get_error_string)(Error) = nullptr;

 private:
  static Result<Runtime> load(const std::string& library);
  std::string library_;
};

// A non-blocking stream of the library's own on `device` (the caller's current device is left as it was).
// `who` names the caller in the error.
Result<Stream> create_library_stream(const Runtime& rt, int device, std::string_view who);

// What an empty name tries, in order.
std::vector<std::string> default_runtime_names();

// Runs `call` with `device` as the calling thread's current device, then restores the thread's own (the
// application's current device must survive the library's work: streams, IPC handles and allocations
// belong to the device current when they are made).
template <typename Call>
Result<void> on_device(const Runtime& rt, int device, Call&& call) {
  int current = 0;
  if (auto e = rt.get_device(&current); e != kSuccess)
    return fail(Errc::Unavailable, "cuda: " + rt.describe("cudaGetDevice", e));
  if (current != device)
    if (auto e = rt.set_device(device); e != kSuccess)
      return fail(Errc::Unavailable, "cuda: " + rt.describe("cudaSetDevice", e));
  Result<void> result = call();
  if (current != device) rt.set_device(current);
  return result;
}

}  // namespace rdmakit::detail::cuda
