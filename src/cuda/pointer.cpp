#include "cuda/pointer.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "cuda/driver.hpp"
#include "cuda/options.hpp"
#include "cuda/runtime.hpp"

namespace rdmakit::detail::cuda {
namespace {

std::string type_name(int type) {
  switch (type) {
    case kUnregistered:
      return "unregistered host memory";
    case kHost:
      return "pinned host memory";
    case kDevice:
      return "device memory";
    case kManaged:
      return "managed memory";
  }
  return "memory of unknown type " + std::to_string(type);
}

// Whether the application has loaded a CUDA driver (or the one RDMAKIT_CUDA_DRIVER names): RTLD_NOLOAD
// finds a loaded library without loading it.
bool driver_loaded() {
  std::string name = cuda_options().driver;
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!handle) return false;
  ::dlclose(handle);  // drops the reference NOLOAD took; the application's own keeps it loaded
  return true;
}

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

Result<PointerInfo> classify_device(const void* data, std::size_t size, std::string_view who) {
  std::string where = std::string(who) + ": " + hex(reinterpret_cast<std::uint64_t>(data)) + " (" +
                      std::to_string(size) + " bytes, MemoryKind::Cuda): ";
  auto rt = Runtime::get();
  if (!rt) return fail(rt.error().code(), where + rt.error().message());
  auto driver = Driver::get();
  if (!driver) return fail(driver.error().code(), where + driver.error().message());
  PointerAttributes attributes{};
  if (auto e = (*rt)->pointer_get_attributes(&attributes, data); e != kSuccess)
    return fail(Errc::InvalidArgument, where + (*rt)->describe("cudaPointerGetAttributes", e));
  PointerInfo info;
  info.device = attributes.device;
  if (attributes.type == kManaged) {
    info.managed = true;  // the CPU can touch it: the host paths serve it
    return info;
  }
  if (attributes.type != kDevice)
    return fail(Errc::InvalidArgument, where + "the CUDA runtime says it is " + type_name(attributes.type) +
                                           ", not device memory (register host memory as MemoryKind::Host)");
  DevicePointer base = 0;
  std::size_t length = 0;
  auto address = reinterpret_cast<DevicePointer>(data);
  if (auto r = (*driver)->mem_get_address_range(&base, &length, address); r != kDriverSuccess)
    return fail(Errc::InvalidArgument, where + (*driver)->describe("cuMemGetAddressRange", r));
  if (size > length - (address - base))
    return fail(Errc::InvalidArgument, where + "the range runs past the end of its device allocation (" +
                                           std::to_string(length) + " bytes at " + hex(base) + ")");
  info.kind = MemoryKind::Cuda;
  info.base = base;
  info.allocation_size = length;
  return info;
}

}  // namespace

Result<PointerInfo> classify(const void* data, std::size_t size, MemoryKind requested, std::string_view who) {
  switch (requested) {
    case MemoryKind::Host:
      return PointerInfo{};
    case MemoryKind::Cuda:
      return classify_device(data, size, who);
    case MemoryKind::Auto: {
      if (!driver_loaded()) return PointerInfo{};
      // The driver answers for any pointer, whichever runtime (if any) the application linked.
      auto driver = Driver::get();
      if (!driver) return PointerInfo{};
      unsigned type = 0;
      auto address = reinterpret_cast<DevicePointer>(data);
      if ((*driver)->pointer_get_attribute(&type, kPointerMemoryType, address) != kDriverSuccess ||
          type != kDriverMemoryDevice)
        return PointerInfo{};  // memory CUDA does not know, or host memory it pinned
      int managed = 0;
      if ((*driver)->pointer_get_attribute(&managed, kPointerIsManaged, address) == kDriverSuccess && managed)
        return PointerInfo{.managed = true};
      return classify_device(data, size, who);  // device memory: a runtime is needed to move it
    }
  }
  return fail(Errc::InvalidArgument,
              std::string(who) + ": unknown MemoryKind " + std::to_string(static_cast<int>(requested)));
}

}  // namespace rdmakit::detail::cuda
