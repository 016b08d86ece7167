// Registering CUDA device memory, against the fake CUDA runtime and driver (tests/fake_cudart/), which the
// library loads through RDMAKIT_CUDA_RUNTIME / RDMAKIT_CUDA_DRIVER as it would load the real ones:
// - the kind the caller gives is resolved once, at registration: Cuda must be device memory covering the
//   whole range, Auto detects it (and loads nothing in a process without a CUDA driver), Host is trusted;
// - a transport takes its path for device memory (tcp: staged) or refuses it with an error naming itself,
//   never treating it as host memory (the fake's device memory faults if the CPU touches it, as a GPU's does);
// - allocate(MemoryKind::Cuda) frees what it allocated when registration fails or the region goes.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/pointer.hpp"
#include "fake_cudart/fake_cudart.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit {
namespace {

using CudaError = int;

// The fake, reached through the same handle the library's dlopen gets (one library, one state).
struct Fake {
  Fake() {
    ::setenv("RDMAKIT_CUDA_RUNTIME", RDMAKIT_FAKE_CUDART, 1);
    ::setenv("RDMAKIT_CUDA_DRIVER", RDMAKIT_FAKE_CUDART, 1);
    handle = ::dlopen(RDMAKIT_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    reset = reinterpret_cast<decltype(reset)>(::dlsym(handle, "fake_cudart_reset"));
    stats = reinterpret_cast<decltype(stats)>(::dlsym(handle, "fake_cudart_stats"));
    cuda_malloc = reinterpret_cast<decltype(cuda_malloc)>(::dlsym(handle, "cudaMalloc"));
    cuda_free = reinterpret_cast<decltype(cuda_free)>(::dlsym(handle, "cudaFree"));
    reset(2);
  }
  long allocations() {
    FakeCudartStats s{};
    stats(&s);
    return s.device_allocations;
  }
  void* handle = nullptr;
  void (*reset)(int) = nullptr;
  void (*stats)(FakeCudartStats*) = nullptr;
  CudaError (*cuda_malloc)(void**, std::size_t) = nullptr;
  CudaError (*cuda_free)(void*) = nullptr;
};

Fake& fake() {
  static Fake instance;
  return instance;
}

// Device memory of the fake, freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t size) { EXPECT_EQ(fake().cuda_malloc(&data_, size), 0); }
  ~DeviceBuffer() { fake().cuda_free(data_); }
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  void* data_ = nullptr;
};

std::shared_ptr<Context> open(const char* transport) {
  Options options;
  options.transport = transport;
  auto context = Context::open(options);
  EXPECT_TRUE(context) << context.error().describe();
  return context ? *context : nullptr;
}

class DeviceMemory : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ASSERT_NE(fake().handle, nullptr) << RDMAKIT_FAKE_CUDART << ": " << ::dlerror(); }
};

// tcp moves device memory staged through host memory; shm has no path for it yet (issue #26).
bool has_path(const std::string& transport) { return transport == "tcp"; }

TEST_P(DeviceMemory, DeviceMemoryTakesTheTransportPathOrIsRefusedNamingIt) {
  auto context = open(GetParam());
  ASSERT_TRUE(context);
  DeviceBuffer gpu(1 << 20);
  for (MemoryKind kind : {MemoryKind::Cuda, MemoryKind::Auto}) {
    SCOPED_TRACE(to_string(kind));
    auto region = context->register_memory(gpu.data() + 512, 1 << 19, Access::All, kind);
    if (has_path(GetParam())) {
      ASSERT_TRUE(region) << region.error().describe();
      EXPECT_EQ((*region)->kind(), MemoryKind::Cuda);
      EXPECT_EQ((*region)->path(), MemoryPath::Staged);
      EXPECT_EQ((*region)->device(), 0);
      EXPECT_EQ((*region)->data(), gpu.data() + 512);
      continue;
    }
    ASSERT_FALSE(region) << "device memory was registered as if it were host memory";
    EXPECT_EQ(region.error().code(), Errc::NotSupported) << region.error().describe();
    EXPECT_NE(region.error().message().find(std::string("over the ") + GetParam() + " transport"),
              std::string::npos)
        << region.error().message();
  }
  // The three-argument form detects too (Auto).
  auto region = context->register_memory(gpu.data(), 1 << 20, Access::All);
  EXPECT_EQ(region.has_value(), has_path(GetParam()));
  if (region) {
    EXPECT_EQ((*region)->kind(), MemoryKind::Cuda);
  }
}

TEST_P(DeviceMemory, HostMemoryStaysOnTheHostPathWhateverTheKindSays) {
  auto context = open(GetParam());
  ASSERT_TRUE(context);
  std::vector<std::byte> host(4096);
  for (MemoryKind kind : {MemoryKind::Host, MemoryKind::Auto}) {
    auto region = context->register_memory(host.data(), host.size(), Access::All, kind);
    ASSERT_TRUE(region) << region.error().describe();
    EXPECT_EQ((*region)->kind(), MemoryKind::Host);
    EXPECT_EQ((*region)->path(), MemoryPath::Host);
    EXPECT_EQ((*region)->device(), -1);
  }
  // Host memory the caller calls device memory is an error, not a silent host registration.
  auto refused = context->register_memory(host.data(), host.size(), Access::All, MemoryKind::Cuda);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
  EXPECT_NE(refused.error().message().find("not device memory"), std::string::npos) << refused.error().message();
}

TEST_P(DeviceMemory, AllocateOnTheDeviceFreesWhatItAllocated) {
  auto context = open(GetParam());
  ASSERT_TRUE(context);
  long before = fake().allocations();
  {
    auto region = context->allocate(1 << 16, Access::All, MemoryKind::Cuda);
    if (has_path(GetParam())) {
      ASSERT_TRUE(region) << region.error().describe();
      EXPECT_EQ((*region)->kind(), MemoryKind::Cuda);
      EXPECT_EQ((*region)->path(), MemoryPath::Staged);
      EXPECT_EQ(fake().allocations(), before + 1);
      EXPECT_EQ(context->live_registrations(), 1u);
    } else {
      ASSERT_FALSE(region);
      EXPECT_EQ(region.error().code(), Errc::NotSupported) << region.error().describe();
    }
  }
  EXPECT_EQ(fake().allocations(), before) << "the cudaMalloc'ed memory leaked";
  EXPECT_EQ(context->live_registrations(), 0u);
  auto empty = context->allocate(0, Access::All, MemoryKind::Cuda);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code(), Errc::InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceMemory, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

// Option gpu_path requires a path: tcp has only the staged one.
TEST(DeviceMemoryGpuPath, ARequiredPathTheTransportLacksIsRefusedNamingIt) {
  ASSERT_NE(fake().handle, nullptr);
  DeviceBuffer gpu(1 << 16);
  for (const char* required : {"direct", "staged", "auto"}) {
    SCOPED_TRACE(required);
    Options options;
    options.transport = "tcp";
    options.gpu_path = required;
    auto context = Context::open(options);
    ASSERT_TRUE(context) << context.error().describe();
    auto region = (*context)->register_memory(gpu.data(), 1 << 16, Access::All, MemoryKind::Cuda);
    if (std::string(required) == "direct") {
      ASSERT_FALSE(region) << "gpu_path=direct accepted the staged path";
      EXPECT_EQ(region.error().code(), Errc::NotSupported);
      EXPECT_NE(region.error().message().find("gpu_path=direct"), std::string::npos) << region.error().message();
      EXPECT_NE(region.error().message().find("only staged"), std::string::npos) << region.error().message();
      EXPECT_EQ((*context)->live_registrations(), 0u) << "the refused registration stayed";
    } else {
      ASSERT_TRUE(region) << region.error().describe();
      EXPECT_EQ((*region)->path(), MemoryPath::Staged);
    }
  }
  Options bad;
  bad.transport = "tcp";
  bad.gpu_path = "fastest";
  auto refused = Context::open(bad);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
  EXPECT_NE(refused.error().message().find("gpu_path"), std::string::npos) << refused.error().message();
}

TEST(DeviceMemoryClassify, ResolvesTheAllocationOfAnInteriorPointer) {
  ASSERT_NE(fake().handle, nullptr);
  DeviceBuffer gpu(3 << 20);
  auto info = detail::cuda::classify(gpu.data() + 4096, 1 << 20, MemoryKind::Cuda, "test");
  ASSERT_TRUE(info) << info.error().describe();
  EXPECT_EQ(info->kind, MemoryKind::Cuda);
  EXPECT_EQ(info->device, 0);
  EXPECT_EQ(info->base, reinterpret_cast<std::uint64_t>(gpu.data()));
  EXPECT_GE(info->allocation_size, std::uint64_t{3} << 20);
  // A range that runs past its allocation.
  auto past = detail::cuda::classify(gpu.data() + 4096, info->allocation_size, MemoryKind::Cuda, "test");
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error().code(), Errc::InvalidArgument);
  EXPECT_NE(past.error().message().find("runs past the end of its device allocation"), std::string::npos)
      << past.error().message();
  auto same = detail::cuda::classify(gpu.data() + 4096, 1 << 20, MemoryKind::Auto, "test");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->kind, MemoryKind::Cuda);
}

TEST(DeviceMemoryClassify, AutoLoadsNothingWithoutADriverInTheProcess) {
  ASSERT_NE(fake().handle, nullptr);
  DeviceBuffer gpu(4096);
  // A driver name this process never loaded: Auto must not load it, and so says host memory.
  ::setenv("RDMAKIT_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  auto info = detail::cuda::classify(gpu.data(), 4096, MemoryKind::Auto, "test");
  ::setenv("RDMAKIT_CUDA_DRIVER", RDMAKIT_FAKE_CUDART, 1);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->kind, MemoryKind::Host);
}

TEST(DeviceMemoryClassify, MissingRuntimeIsAClearError) {
  std::vector<std::byte> host(64);
  ::setenv("RDMAKIT_CUDA_RUNTIME", "/nonexistent/libcudart.so.99", 1);
  auto info = detail::cuda::classify(host.data(), host.size(), MemoryKind::Cuda, "register_memory");
  ::setenv("RDMAKIT_CUDA_RUNTIME", RDMAKIT_FAKE_CUDART, 1);
  ASSERT_FALSE(info);
  EXPECT_EQ(info.error().code(), Errc::Unavailable);
  EXPECT_NE(info.error().message().find("no CUDA runtime could be loaded"), std::string::npos)
      << info.error().message();
  EXPECT_NE(info.error().message().find("/nonexistent/libcudart.so.99"), std::string::npos);
}

TEST(DeviceMemoryNames, PathsAndKindsHaveTheirDocumentedNames) {
  EXPECT_EQ(to_string(MemoryPath::GpuDirectDmabuf), "gpudirect-dmabuf");
  EXPECT_EQ(to_string(MemoryPath::GpuDirectPeermem), "gpudirect-peermem");
  EXPECT_EQ(to_string(MemoryPath::CudaIpc), "cuda-ipc");
  EXPECT_EQ(to_string(MemoryPath::Staged), "staged");
  EXPECT_EQ(to_string(MemoryPath::Host), "host");
  EXPECT_EQ(to_string(MemoryKind::Cuda), "cuda");
}

}  // namespace
}  // namespace rdmakit
