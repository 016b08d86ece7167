#include "cuda/driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "cuda/options.hpp"

namespace rdmakit::detail::cuda {
namespace {

template <typename Function>
void bind(void* handle, const char* name, Function& slot, std::string* missing) {
  slot = reinterpret_cast<Function>(::dlsym(handle, name));
  if (!slot && missing) *missing += (missing->empty() ? "" : ", ") + std::string(name);
}

Result<std::unique_ptr<Driver>> load(std::string& library_out) {
  std::string name = cuda_options().driver;
  library_out = name;
  // Never closed, as the runtime (runtime.hpp).
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return fail(Errc::Unavailable,
                "cuda: the CUDA driver " + name + " could not be loaded: " + (why ? why : "unknown error"));
  }
  auto driver = std::make_unique<Driver>();
  std::string missing;
  bind(handle, "cuInit", driver->init, &missing);
  bind(handle, "cuGetErrorString", driver->get_error_string, &missing);
  bind(handle, "cuMemGetAddressRange_v2", driver->mem_get_address_range, &missing);
  bind(handle, "cuPointerGetAttribute", driver->pointer_get_attribute, &missing);
  bind(handle, "cuDeviceGetAttribute", driver->device_get_attribute, &missing);
  bind(handle, "cuMemGetHandleForAddressRange", driver->mem_get_handle_for_address_range, nullptr);
  if (!missing.empty())
    return fail(Errc::Unavailable, "cuda: " + name + " lacks CUDA driver symbols: " + missing);
  return driver;
}

}  // namespace

std::string Driver::describe(const char* call, DriverResult result) const {
  const char* text = nullptr;
  if (get_error_string) get_error_string(result, &text);
  return std::string(call) + ": " + (text ? text : "unknown CUDA driver error") + " (CUresult " +
         std::to_string(result) + ", driver " + library_ + ")";
}

Result<const Driver*> Driver::get() {
  static std::once_flag once;
  static Result<std::unique_ptr<Driver>> loaded =
      std::unexpected(rdmakit::Error(Errc::Unavailable, "cuda: not loaded"));
  std::call_once(once, [] {
    std::string name;
    loaded = load(name);
    if (!loaded) return;
    (*loaded)->library_ = name;
    if (auto r = (*loaded)->init(0); r != kDriverSuccess)
      loaded = fail(Errc::Unavailable, "cuda: " + (*loaded)->describe("cuInit", r));
  });
  if (!loaded) return std::unexpected(loaded.error());
  return loaded->get();
}

}  // namespace rdmakit::detail::cuda
