#include "cuda/runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "cuda/options.hpp"

namespace rdmakit::detail::cuda {
namespace {

std::string last_dlerror() {
  const char* text = ::dlerror();
  return text ? text : "unknown dlopen error";
}

template <typename Function>
void bind(void* handle, const char* name, Function& slot, std::string& missing) {
  slot = reinterpret_cast<Function>(::dlsym(handle, name));
  if (!slot) missing += (missing.empty() ? "" : ", ") + std::string(name);
}

std::string bind_all(void* handle, Runtime& rt) {
  std::string missing;
  bind(handle, "cudaGetDeviceCount", rt.get_device_count, missing);
  bind(handle, "cudaGetDevice", rt.get_device, missing);
  bind(handle, "cudaSetDevice", rt.set_device, missing);
  bind(handle, "cudaPointerGetAttributes", rt.pointer_get_attributes, missing);
  bind(handle, "cudaStreamCreateWithFlags", rt.stream_create_with_flags, missing);
  bind(handle, "cudaStreamDestroy", rt.stream_destroy, missing);
  bind(handle, "cudaStreamSynchronize", rt.stream_synchronize, missing);
  bind(handle, "cudaMemcpyAsync", rt.memcpy_async, missing);
  bind(handle, "cudaMemcpy", rt.memcpy, missing);
  bind(handle, "cudaHostRegister", rt.host_register, missing);
  bind(handle, "cudaHostUnregister", rt.host_unregister, missing);
  bind(handle, "cudaMalloc", rt.malloc, missing);
  bind(handle, "cudaFree", rt.free, missing);
  bind(handle, "cudaEventCreateWithFlags", rt.event_create_with_flags, missing);
  bind(handle, "cudaEventRecord", rt.event_record, missing);
  bind(handle, "cudaEventQuery", rt.event_query, missing);
  bind(handle, "cudaEventSynchronize", rt.event_synchronize, missing);
  bind(handle, "cudaEventDestroy", rt.event_destroy, missing);
  bind(handle, "cudaIpcGetMemHandle", rt.ipc_get_mem_handle, missing);
  bind(handle, "cudaIpcOpenMemHandle", rt.ipc_open_mem_handle, missing);
  bind(handle, "cudaIpcCloseMemHandle", rt.ipc_close_mem_handle, missing);
  bind(handle, "cudaGetErrorString", rt.get_error_string, missing);
  return missing;
}

std::string requested_name(const std::string& library) {
  return library.empty() ? cuda_options().runtime : library;
}

}  // namespace

std::vector<std::string> default_runtime_names() {
  return {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
}

std::string Runtime::describe(const char* call, Error error) const {
  const char* text = get_error_string ? get_error_string(error) : nullptr;
  return std::string(call) + ": " + (text ? text : "unknown CUDA error") + " (error " +
         std::to_string(error) + ", runtime " + library_ + ")";
}

Result<Runtime> Runtime::load(const std::string& library) {
  auto names = library.empty() ? default_runtime_names() : std::vector<std::string>{library};
  std::string tried;
  void* handle = nullptr;
  Runtime rt;
  for (const auto& name : names) {
    // RTLD_LOCAL: the runtime's symbols stay out of the global namespace (an application that links its
    // own libcudart keeps its own). Never closed: see the class comment.
    handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      rt.library_ = name;
      break;
    }
    tried += "\n  " + name + ": " + last_dlerror();
  }
  if (!handle) return fail(Errc::Unavailable, "cuda: no CUDA runtime could be loaded; tried:" + tried);
  if (auto missing = bind_all(handle, rt); !missing.empty())
    return fail(Errc::Unavailable, "cuda: " + rt.library_ + " lacks CUDA runtime symbols: " + missing);
  return rt;
}

Result<const Runtime*> Runtime::get(const std::string& library) {
  static std::mutex mutex;
  static std::map<std::string, Result<std::unique_ptr<Runtime>>> loaded;  // by requested name, failures too
  std::string name = requested_name(library);
  const Runtime* rt = nullptr;
  {
    std::lock_guard lock(mutex);
    auto it = loaded.find(name);
    if (it == loaded.end()) {
      auto attempt = load(name);
      Result<std::unique_ptr<Runtime>> entry =
          attempt ? Result<std::unique_ptr<Runtime>>(std::make_unique<Runtime>(std::move(*attempt)))
                  : std::unexpected(attempt.error());
      it = loaded.emplace(name, std::move(entry)).first;
    }
    if (!it->second) return std::unexpected(it->second.error());
    rt = it->second->get();
  }
  int devices = 0;
  if (auto e = rt->get_device_count(&devices); e != kSuccess)
    return fail(Errc::Unavailable,
                "cuda: the CUDA runtime is unusable: " + rt->describe("cudaGetDeviceCount", e));
  if (devices == 0)
    return fail(Errc::Unavailable, "cuda: the CUDA runtime (" + rt->library_ + ") sees no device");
  return rt;
}

Result<Stream> create_library_stream(const Runtime& rt, int device, std::string_view who) {
  Stream stream = nullptr;
  auto made = on_device(rt, device, [&]() -> Result<void> {
    if (auto e = rt.stream_create_with_flags(&stream, kStreamNonBlocking); e != kSuccess)
      return fail(Errc::Unavailable, std::string(who) + ": " + rt.describe("cudaStreamCreateWithFlags", e));
    return {};
  });
  if (!made) return std::unexpected(made.error());
  return stream;
}

}  // namespace rdmakit::detail::cuda
