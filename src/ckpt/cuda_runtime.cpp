#include "ckpt/cuda_runtime.hpp"

#include <dlfcn.h>

namespace rdmakit::ckpt::detail {
namespace {

std::string last_dlerror() {
  const char* text = ::dlerror();
  return text ? text : "unknown dlopen error";
}

template <typename Function>
bool bind(void* handle, const char* name, Function& slot, std::string& missing) {
  slot = reinterpret_cast<Function>(::dlsym(handle, name));
  if (!slot) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return slot != nullptr;
}

Result<void> bind_all(void* handle, CudaRuntime& rt) {
  std::string missing;
  bind(handle, "cudaGetDeviceCount", rt.get_device_count, missing);
  bind(handle, "cudaGetDevice", rt.get_device, missing);
  bind(handle, "cudaSetDevice", rt.set_device, missing);
  bind(handle, "cudaPointerGetAttributes", rt.pointer_get_attributes, missing);
  bind(handle, "cudaStreamCreateWithFlags", rt.stream_create_with_flags, missing);
  bind(handle, "cudaStreamDestroy", rt.stream_destroy, missing);
  bind(handle, "cudaStreamSynchronize", rt.stream_synchronize, missing);
  bind(handle, "cudaMemcpyAsync", rt.memcpy_async, missing);
  bind(handle, "cudaHostRegister", rt.host_register, missing);
  bind(handle, "cudaHostUnregister", rt.host_unregister, missing);
  bind(handle, "cudaGetErrorString", rt.get_error_string, missing);
  if (!missing.empty())
    return fail(Errc::Unavailable, "ckpt: " + rt.library() + " lacks CUDA runtime symbols: " + missing);
  return {};
}

}  // namespace

std::vector<std::string> default_cudart_names() {
  return {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
}

std::string CudaRuntime::describe(const char* call, cuda::Error error) const {
  const char* text = get_error_string ? get_error_string(error) : nullptr;
  return std::string(call) + ": " + (text ? text : "unknown CUDA error") + " (error " +
         std::to_string(error) + ", runtime " + library_ + ")";
}

Result<CudaRuntime> CudaRuntime::load(const std::string& library) {
  auto names = library.empty() ? default_cudart_names() : std::vector<std::string>{library};
  std::string tried;
  void* handle = nullptr;
  CudaRuntime rt;
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
  if (!handle)
    return fail(Errc::Unavailable,
                "ckpt: a buffer is CUDA memory but no CUDA runtime could be loaded; tried:" + tried);
  if (auto ok = bind_all(handle, rt); !ok) return std::unexpected(ok.error());
  int devices = 0;
  if (auto e = rt.get_device_count(&devices); e != cuda::kSuccess)
    return fail(Errc::Unavailable, "ckpt: a buffer is CUDA memory but the CUDA runtime is unusable: " +
                                       rt.describe("cudaGetDeviceCount", e));
  if (devices == 0)
    return fail(Errc::Unavailable,
                "ckpt: a buffer is CUDA memory but the CUDA runtime (" + rt.library_ + ") sees no device");
  return rt;
}

}  // namespace rdmakit::ckpt::detail
