// The CUDA memory kind of the checkpoint engine, against a fake CUDA runtime (tests/fake_cudart/) loaded
// through the engine's own dlopen path (EngineOptions::cuda_runtime): bytes land, copies run on the
// engine's own non-blocking streams from pinned staging, injected CUDA errors surface with their cause,
// and nothing stays pinned or allocated. Then the real runtime: without a GPU (here) the engine must
// refuse CUDA buffers with a clear error; with one, a real round trip runs (else a SKIP says why).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt_support.hpp"
#include "cuda/runtime.hpp"
#include "fake_cudart/fake_cudart.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt {
namespace {

using ckpt::testing::fill_seeded;
using ckpt::testing::seeded_mismatch;
using ckpt::testing::TempDir;

using CudaError = int;

// The fake's exports, reached through the handle the engine's dlopen also gets (one library, one state).
struct Fake {
  Fake() {
    handle = ::dlopen(fake_cudart_file(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    reset = reinterpret_cast<decltype(reset)>(::dlsym(handle, "fake_cudart_reset"));
    stats = reinterpret_cast<decltype(stats)>(::dlsym(handle, "fake_cudart_stats"));
    fail = reinterpret_cast<decltype(fail)>(::dlsym(handle, "fake_cudart_fail"));
    cuda_malloc = reinterpret_cast<decltype(cuda_malloc)>(::dlsym(handle, "cudaMalloc"));
    cuda_free = reinterpret_cast<decltype(cuda_free)>(::dlsym(handle, "cudaFree"));
    set_device = reinterpret_cast<decltype(set_device)>(::dlsym(handle, "cudaSetDevice"));
    get_device = reinterpret_cast<decltype(get_device)>(::dlsym(handle, "cudaGetDevice"));
    host_view = reinterpret_cast<decltype(host_view)>(::dlsym(handle, "fake_cudart_host_view"));
    reset(2);  // before any test allocates fake device memory on its two GPUs
  }
  FakeCudartStats now() const {
    FakeCudartStats s{};
    stats(&s);
    return s;
  }
  void* handle = nullptr;
  void (*reset)(int) = nullptr;
  void (*stats)(FakeCudartStats*) = nullptr;
  void (*fail)(const char*, int, int) = nullptr;
  CudaError (*cuda_malloc)(void**, std::size_t) = nullptr;
  CudaError (*cuda_free)(void*) = nullptr;
  CudaError (*set_device)(int) = nullptr;
  CudaError (*get_device)(int*) = nullptr;
  void* (*host_view)(const void*) = nullptr;
};

// "Device" memory of the fake on one of its GPUs.
class DeviceBuffer {
 public:
  DeviceBuffer(Fake& fake, int device, std::size_t size) : fake_(fake), size_(size) {
    int current = 0;
    fake.get_device(&current);
    fake.set_device(device);
    fake.cuda_malloc(&data_, size);
    fake.set_device(current);
  }
  ~DeviceBuffer() { fake_.cuda_free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // The device address, for the engine: the CPU touching it faults, as on a GPU.
  unsigned char* data() const { return static_cast<unsigned char*>(data_); }
  // The fake's host view of the same bytes, where the test reads and writes them.
  unsigned char* view() const { return static_cast<unsigned char*>(fake_.host_view(data_)); }
  std::size_t size() const { return size_; }

 private:
  Fake& fake_;
  void* data_ = nullptr;
  std::size_t size_;
};

class CkptCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(fake.handle, nullptr) << fake_cudart_file() << ": " << ::dlerror();
    ASSERT_NE(gpu0.view(), nullptr);
    ASSERT_NE(gpu1.view(), nullptr);
  }

  EngineOptions options() const {
    auto o = ckpt::testing::test_options(dir.path());
    o.cuda_runtime = fake_cudart_file();
    return o;
  }

  // Two GPUs' buffers (odd sizes) around a host one, so kinds interleave in staging.
  std::vector<Buffer> buffers() {
    return {{"gpu0.weight", gpu0.data(), gpu0.size(), DType::U8, {}, MemoryKind::Cuda},
            {"host.step", host.data(), host.size(), DType::U8, {}, MemoryKind::Host},
            {"gpu1.adam", gpu1.data(), gpu1.size(), DType::U8, {}, MemoryKind::Cuda}};
  }
  void fill(std::uint64_t seed) {
    fill_seeded(gpu0.view(), gpu0.size(), seed * 3);
    fill_seeded(host.data(), host.size(), seed * 3 + 1);
    fill_seeded(gpu1.view(), gpu1.size(), seed * 3 + 2);
  }
  void clear() {
    std::memset(gpu0.view(), 0, gpu0.size());
    std::memset(host.data(), 0, host.size());
    std::memset(gpu1.view(), 0, gpu1.size());
  }
  bool matches(std::uint64_t seed) const {
    return seeded_mismatch(gpu0.view(), gpu0.size(), seed * 3) == gpu0.size() &&
           seeded_mismatch(host.data(), host.size(), seed * 3 + 1) == host.size() &&
           seeded_mismatch(gpu1.view(), gpu1.size(), seed * 3 + 2) == gpu1.size();
  }

  Fake fake;
  TempDir dir;
  DeviceBuffer gpu0{fake, 0, 700'001};
  std::vector<unsigned char> host = std::vector<unsigned char>(300'007);
  DeviceBuffer gpu1{fake, 1, 1'200'003};
};

TEST_F(CkptCuda, DeviceBuffersRoundTripThroughPinnedStagingOnTheEnginesStreams) {
  fake.set_device(1);  // the application's current device must survive the engine's stream set-up
  {
    auto engine = Engine::create(options(), buffers());
    ASSERT_TRUE(engine) << engine.error().describe();
    auto s = fake.now();
    EXPECT_EQ(s.streams_alive, 2) << "one stream per device";
    EXPECT_EQ(s.streams_blocking, 0) << "streams must not synchronize with the default stream";
    EXPECT_EQ(s.registered_ranges, 1) << "staging is pinned";
    int current = -1;
    fake.get_device(&current);
    EXPECT_EQ(current, 1);

    fill(7);
    ASSERT_TRUE((*engine)->snapshot(7));
    fill(8);  // snapshot() returned: the buffers may change, the checkpoint must still be step 7's
    auto report = (*engine)->wait_persisted();
    ASSERT_TRUE(report) << report.error().describe();
    ASSERT_TRUE(verify_checkpoint(report->path));
    clear();
    auto step = (*engine)->restore_latest();
    ASSERT_TRUE(step) << step.error().describe();
    EXPECT_EQ(*step, 7u);
    EXPECT_TRUE(matches(7));
    s = fake.now();
    EXPECT_EQ(s.copies, 4) << "one cudaMemcpyAsync per device buffer, each way";
    EXPECT_EQ(s.copies_default_stream, 0);
    EXPECT_EQ(s.copies_unpinned, 0);
  }
  auto s = fake.now();
  EXPECT_EQ(s.streams_alive, 0);
  EXPECT_EQ(s.registered_ranges, 0) << "staging must be unpinned before it is unmapped";
  EXPECT_EQ(s.copies_dropped, 0);
}

// Subset restore of a mixed state: a named device buffer is copied back alone (one cudaMemcpyAsync), a
// named host buffer by the host mover alone (no device copy); the others keep every byte of their sentinel.
TEST_F(CkptCuda, SubsetRestoreCopiesOnlyTheNamedBuffers) {
  auto engine = Engine::create(options(), buffers());
  ASSERT_TRUE(engine) << engine.error().describe();
  fill(5);
  ASSERT_TRUE((*engine)->snapshot(5));
  ASSERT_TRUE((*engine)->wait_persisted());
  auto sentinel = [&] {
    std::memset(gpu0.view(), 0xA5, gpu0.size());
    std::memset(host.data(), 0xA5, host.size());
    std::memset(gpu1.view(), 0xA5, gpu1.size());
  };
  auto untouched = [](const unsigned char* p, std::size_t size) {
    return std::all_of(p, p + size, [](unsigned char b) { return b == 0xA5; });
  };

  sentinel();
  auto copies = fake.now().copies;
  ASSERT_EQ((*engine)->restore_latest({"gpu1.adam"}).value_or(0), 5u);
  EXPECT_EQ(fake.now().copies, copies + 1) << "only the named device buffer is copied to the GPU";
  EXPECT_EQ(seeded_mismatch(gpu1.view(), gpu1.size(), 5 * 3 + 2), gpu1.size());
  EXPECT_TRUE(untouched(gpu0.view(), gpu0.size()));
  EXPECT_TRUE(untouched(host.data(), host.size()));

  sentinel();
  copies = fake.now().copies;
  ASSERT_EQ((*engine)->restore(5, {"host.step"}).value_or(0), 5u);
  EXPECT_EQ(fake.now().copies, copies) << "no device buffer was named";
  EXPECT_EQ(seeded_mismatch(host.data(), host.size(), 5 * 3 + 1), host.size());
  EXPECT_TRUE(untouched(gpu0.view(), gpu0.size()));
  EXPECT_TRUE(untouched(gpu1.view(), gpu1.size()));

  sentinel();
  auto refused = (*engine)->restore_latest({"gpu0.weight", "gpu2.weight"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
  EXPECT_NE(refused.error().message().find("'gpu2.weight'"), std::string::npos) << refused.error().message();
  EXPECT_TRUE(untouched(gpu0.view(), gpu0.size()));
  EXPECT_EQ(fake.now().copies_dropped, 0);
}

TEST_F(CkptCuda, LazyModeCopiesDeviceBuffersInTheBackground) {
  auto o = options();
  o.lazy = true;
  auto engine = Engine::create(o, buffers());
  ASSERT_TRUE(engine) << engine.error().describe();
  fill(11);
  ASSERT_TRUE((*engine)->snapshot(11));
  ASSERT_TRUE((*engine)->wait_snapshot());
  fill(12);
  ASSERT_TRUE((*engine)->wait_persisted());
  clear();
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 11u);
  EXPECT_TRUE(matches(11));
}

TEST_F(CkptCuda, FailedCopyFailsTheSnapshotWithItsCauseAndTheNextOneWorks) {
  auto engine = Engine::create(options(), buffers());
  ASSERT_TRUE(engine) << engine.error().describe();
  fill(1);
  ASSERT_TRUE((*engine)->snapshot(1));
  ASSERT_TRUE((*engine)->wait_persisted());

  fill(2);
  fake.fail("cudaMemcpyAsync", 1, 1);  // the second device buffer's copy is refused
  auto refused = (*engine)->snapshot(2);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Errc::TransportFailure);
  EXPECT_NE(refused.error().message().find("step 2"), std::string::npos) << refused.error().message();
  EXPECT_NE(refused.error().message().find("'gpu1.adam'"), std::string::npos) << refused.error().message();
  EXPECT_NE(refused.error().message().find("cudaMemcpyAsync: invalid argument"), std::string::npos)
      << refused.error().message();

  fill(3);
  fake.fail("cudaStreamSynchronize", 0, 700);  // an asynchronous error, seen when waiting
  auto broken = (*engine)->snapshot(3);
  ASSERT_FALSE(broken);
  EXPECT_NE(broken.error().message().find("illegal memory access"), std::string::npos)
      << broken.error().message();

  auto list = list_checkpoints(dir.path());
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u) << "a snapshot whose copy failed must not be persisted";
  EXPECT_EQ(list->front().step, 1u);
  EXPECT_EQ(fake.now().copies_dropped, 0) << "queued copies are waited for before staging is reused";

  fill(4);
  ASSERT_TRUE((*engine)->snapshot(4));
  ASSERT_EQ((*engine)->wait_persisted().value_or(PersistReport{}).step, 4u);
  clear();
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 4u);
  EXPECT_TRUE(matches(4));
}

TEST_F(CkptCuda, FailedBackgroundCopySurfacesAtWaitSnapshot) {
  auto o = options();
  o.lazy = true;
  auto engine = Engine::create(o, buffers());
  ASSERT_TRUE(engine) << engine.error().describe();
  fill(5);
  fake.fail("cudaMemcpyAsync", 0, 1);
  ASSERT_TRUE((*engine)->snapshot(5));  // lazy: the copy (and its failure) happens later
  auto failed = (*engine)->wait_snapshot();
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message().find("step 5"), std::string::npos) << failed.error().message();
  EXPECT_NE(failed.error().message().find("cudaMemcpyAsync"), std::string::npos) << failed.error().message();
  EXPECT_EQ((*engine)->wait_persisted().error().code(), Errc::NotFound) << "nothing was persisted";
  ASSERT_TRUE((*engine)->snapshot(6));
  ASSERT_TRUE((*engine)->wait_snapshot());
  ASSERT_EQ((*engine)->wait_persisted().value_or(PersistReport{}).step, 6u);
}

TEST_F(CkptCuda, FailedRestoreCopyIsReported) {
  auto engine = Engine::create(options(), buffers());
  ASSERT_TRUE(engine) << engine.error().describe();
  fill(9);
  ASSERT_TRUE((*engine)->snapshot(9));
  ASSERT_TRUE((*engine)->wait_persisted());
  fake.fail("cudaMemcpyAsync", 0, 2);
  auto restored = (*engine)->restore_latest();
  ASSERT_FALSE(restored);
  EXPECT_NE(restored.error().message().find("to the GPU"), std::string::npos) << restored.error().message();
  EXPECT_NE(restored.error().message().find("out of memory"), std::string::npos)
      << restored.error().message();
}

TEST_F(CkptCuda, HostMemoryMarkedCudaIsRefused) {
  auto list = buffers();
  list[1].kind = MemoryKind::Cuda;
  auto engine = Engine::create(options(), list);
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error().code(), Errc::InvalidArgument);
  EXPECT_NE(engine.error().message().find("'host.step'"), std::string::npos) << engine.error().message();
  EXPECT_NE(engine.error().message().find("not device memory"), std::string::npos)
      << engine.error().message();
  auto s = fake.now();
  EXPECT_EQ(s.streams_alive, 0);
  EXPECT_EQ(s.registered_ranges, 0);
}

TEST_F(CkptCuda, PinningFailureIsReported) {
  fake.fail("cudaHostRegister", 0, 2);
  auto engine = Engine::create(options(), buffers());
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error().code(), Errc::ResourceExhausted);
  EXPECT_NE(engine.error().message().find("cudaHostRegister: out of memory"), std::string::npos)
      << engine.error().message();
  EXPECT_EQ(fake.now().streams_alive, 0);
}

TEST_F(CkptCuda, RuntimeWithoutDevicesIsRefused) {
  fake.reset(0);
  auto engine = Engine::create(options(), buffers());
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error().code(), Errc::Unavailable);
  EXPECT_NE(engine.error().message().find("no CUDA-capable device"), std::string::npos)
      << engine.error().message();
}

TEST_F(CkptCuda, MissingOrForeignLibraryIsRefusedClearly) {
  auto o = options();
  o.cuda_runtime = "/nonexistent/libcudart.so.99";
  auto missing = Engine::create(o, buffers());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Errc::Unavailable);
  EXPECT_NE(missing.error().message().find("no CUDA runtime could be loaded"), std::string::npos)
      << missing.error().message();
  EXPECT_NE(missing.error().message().find("/nonexistent/libcudart.so.99"), std::string::npos);
  EXPECT_NE(missing.error().message().find("'gpu0.weight', 'gpu1.adam'"), std::string::npos)
      << missing.error().message();

  o.cuda_runtime = "libm.so.6";  // loads, but is no CUDA runtime
  auto foreign = Engine::create(o, buffers());
  ASSERT_FALSE(foreign);
  EXPECT_NE(foreign.error().message().find("lacks CUDA runtime symbols: cudaGetDeviceCount"),
            std::string::npos)
      << foreign.error().message();
}

// Host-only states never load a CUDA runtime, even a broken one named in the options.
TEST_F(CkptCuda, HostOnlyStateNeverLoadsTheRuntime) {
  auto o = options();
  o.cuda_runtime = "/nonexistent/libcudart.so.99";
  auto engine = Engine::create(o, {{"host.step", host.data(), host.size(), DType::U8, {}}});
  ASSERT_TRUE(engine) << engine.error().describe();
}

// The real CUDA runtime, found as the engine finds it. Without a GPU (every machine this was written on)
// a CUDA buffer must be refused with a clear error; with one, bytes must round-trip through device memory.
TEST(CkptCudaReal, RealRuntimeRoundTripOrClearRefusal) {
  TempDir dir;
  auto rt = ::rdmakit::detail::cuda::Runtime::get("");
  std::vector<unsigned char> fake_device(1 << 20);
  if (!rt) {
    // What the engine says for a CUDA buffer when the runtime or the GPU is missing.
    auto engine =
        Engine::create(ckpt::testing::test_options(dir.path()),
                       {{"w", fake_device.data(), fake_device.size(), DType::U8, {}, MemoryKind::Cuda}});
    ASSERT_FALSE(engine);
    EXPECT_EQ(engine.error().code(), Errc::Unavailable);
    EXPECT_NE(engine.error().message().find("buffer 'w' (MemoryKind::Cuda)"), std::string::npos)
        << engine.error().message();
    EXPECT_TRUE(engine.error().message().find("no CUDA runtime could be loaded") != std::string::npos ||
                engine.error().message().find("unusable") != std::string::npos ||
                engine.error().message().find("sees no device") != std::string::npos)
        << engine.error().message();
    std::printf("SKIP: no usable CUDA GPU here, the CUDA path did not run on a GPU (%s)\n",
                engine.error().message().c_str());
    GTEST_SKIP() << "no usable CUDA GPU: " << rt.error().message();
  }
  void* handle = ::dlopen((*rt)->library().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr);
  auto cuda_malloc = reinterpret_cast<CudaError (*)(void**, std::size_t)>(::dlsym(handle, "cudaMalloc"));
  auto cuda_free = reinterpret_cast<CudaError (*)(void*)>(::dlsym(handle, "cudaFree"));
  auto cuda_memcpy =
      reinterpret_cast<CudaError (*)(void*, const void*, std::size_t, int)>(::dlsym(handle, "cudaMemcpy"));
  ASSERT_TRUE(cuda_malloc && cuda_free && cuda_memcpy);
  void* device = nullptr;
  ASSERT_EQ(cuda_malloc(&device, fake_device.size()), 0);
  fill_seeded(fake_device.data(), fake_device.size(), 42);
  ASSERT_EQ(cuda_memcpy(device, fake_device.data(), fake_device.size(), 1), 0);
  {
    auto engine = Engine::create(ckpt::testing::test_options(dir.path()),
                                 {{"w", device, fake_device.size(), DType::U8, {}, MemoryKind::Cuda}});
    ASSERT_TRUE(engine) << engine.error().describe();
    ASSERT_TRUE((*engine)->snapshot(1));
    ASSERT_TRUE((*engine)->wait_persisted());
    std::vector<unsigned char> zeros(fake_device.size());
    ASSERT_EQ(cuda_memcpy(device, zeros.data(), zeros.size(), 1), 0);
    ASSERT_EQ((*engine)->restore_latest().value_or(0), 1u);
  }
  std::vector<unsigned char> back(fake_device.size());
  ASSERT_EQ(cuda_memcpy(back.data(), device, back.size(), 2), 0);
  EXPECT_EQ(seeded_mismatch(back.data(), back.size(), 42), back.size());
  cuda_free(device);
  std::printf("the CUDA path ran on a real GPU (%s)\n", (*rt)->library().c_str());
}

}  // namespace
}  // namespace rdmakit::ckpt
