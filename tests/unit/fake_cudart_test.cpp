// The fake CUDA runtime and driver (tests/fake_cudart/) checked against what the real ones do, since every
// GPU test without a GPU trusts it: device memory faults on the CPU, copies land exact bytes and are
// checked like the runtime checks them, stream copies stay invisible until waited for, IPC handles really
// cross processes, and the driver's pointer queries and dmabuf export answer as documented.
#include "fake_cudart/fake_cudart.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
struct cudaPointerAttributes {
  int type;
  int device;
  void* devicePointer;
  void* hostPointer;
  long reserved[8];
};
struct cudaIpcMemHandle_t {
  char reserved[64];
};
int cudaMalloc(void**, std::size_t);
int cudaFree(void*);
int cudaMallocManaged(void**, std::size_t, unsigned);
int cudaMallocHost(void**, std::size_t);
int cudaFreeHost(void*);
int cudaHostRegister(void*, std::size_t, unsigned);
int cudaHostUnregister(void*);
int cudaSetDevice(int);
int cudaMemcpy(void*, const void*, std::size_t, int);
int cudaMemcpyAsync(void*, const void*, std::size_t, int, void*);
int cudaStreamCreateWithFlags(void**, unsigned);
int cudaStreamDestroy(void*);
int cudaStreamSynchronize(void*);
int cudaStreamQuery(void*);
int cudaEventCreateWithFlags(void**, unsigned);
int cudaEventRecord(void*, void*);
int cudaEventSynchronize(void*);
int cudaEventQuery(void*);
int cudaEventDestroy(void*);
int cudaStreamWaitEvent(void*, void*, unsigned);
int cudaPointerGetAttributes(cudaPointerAttributes*, const void*);
int cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*);
int cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned);
int cudaIpcCloseMemHandle(void*);
int cuDeviceGetAttribute(int*, int, int);
int cuGetErrorString(int, const char**);
int cuMemGetAddressRange_v2(unsigned long long*, std::size_t*, unsigned long long);
int cuPointerGetAttribute(void*, int, unsigned long long);
int cuMemGetHandleForAddressRange(void*, unsigned long long, std::size_t, int, unsigned long long);
}

namespace {

enum { kH2H = 0, kH2D = 1, kD2H = 2, kD2D = 3, kDefault = 4 };
constexpr int kInvalidValue = 1, kInvalidMemcpyDirection = 21, kInvalidContext = 201, kInvalidHandle = 400,
              kNotFound = 500, kNotReady = 600, kNotSupported = 801;

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

unsigned long long dptr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

std::vector<unsigned char> pattern(std::size_t size, unsigned seed) {
  std::vector<unsigned char> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<unsigned char>(i * 31 + seed * 7 + (i >> 8));
  return v;
}

// Device bytes as the fake sees them.
std::vector<unsigned char> device_bytes(const void* device, std::size_t size) {
  auto* view = static_cast<const unsigned char*>(fake_cudart_host_view(device));
  return view ? std::vector<unsigned char>(view, view + size) : std::vector<unsigned char>{};
}

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t size) { EXPECT_EQ(cudaMalloc(&p_, size), 0); }
  ~DeviceMemory() { EXPECT_EQ(cudaFree(p_), 0); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  unsigned char* get() const { return static_cast<unsigned char*>(p_); }

 private:
  void* p_ = nullptr;
};

FakeCudartStats stats() {
  FakeCudartStats s{};
  fake_cudart_stats(&s);
  return s;
}

class FakeCudart : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cudart_reset(2);
    before_ = stats();
  }
  void TearDown() override {
    auto now = stats();  // nothing a test made outlives it
    EXPECT_EQ(now.device_allocations, before_.device_allocations);
    EXPECT_EQ(now.streams_alive, before_.streams_alive);
    EXPECT_EQ(now.events_alive, before_.events_alive);
    EXPECT_EQ(now.registered_ranges, before_.registered_ranges);
    EXPECT_EQ(now.ipc_open_alive, 0);
  }
  FakeCudartStats before_{};
};

TEST_F(FakeCudart, CpuAccessToDeviceMemoryFaultsAndTheHostViewDoesNot) {
  GTEST_FLAG_SET(death_test_style, "fast");  // fork only: no second start of the program
  DeviceMemory d(100);
#if !defined(__SANITIZE_THREAD__)  // the fake maps anywhere under ThreadSanitizer (state.cpp)
  EXPECT_EQ(dptr(d.get()) >> 40, 0x5eu) << "device addresses are recognisable (unless the range was taken)";
#endif
  auto* view = static_cast<unsigned char*>(fake_cudart_host_view(d.get() + 10));
  ASSERT_NE(view, nullptr);
  EXPECT_NE(static_cast<void*>(view), static_cast<void*>(d.get() + 10));
  view[0] = 42;
  unsigned char back = 0;
  ASSERT_EQ(cudaMemcpy(&back, d.get() + 10, 1, kD2H), 0);
  EXPECT_EQ(back, 42);
  EXPECT_EQ(fake_cudart_host_view(&back), nullptr) << "host memory has no device view";
  // A SIGSEGV, as a GPU pointer dereferenced on the CPU gives (the default action, so that a sanitizer's
  // handler does not spend a second symbolizing a report).
  EXPECT_EXIT(
      {
        std::signal(SIGSEGV, SIG_DFL);
        volatile unsigned char* p = d.get();
        p[0] = p[1];
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

TEST_F(FakeCudart, CopiesOfEveryKindLandExactBytes) {
  const std::size_t size = 3 * kPage + 123;
  DeviceMemory a(size), b(size);
  auto src = pattern(size, 1);
  std::vector<unsigned char> out(size), host2(size);
  ASSERT_EQ(cudaMemcpy(a.get(), src.data(), size, kH2D), 0);
  EXPECT_EQ(device_bytes(a.get(), size), src);
  ASSERT_EQ(cudaMemcpy(b.get(), a.get(), size, kD2D), 0);
  EXPECT_EQ(device_bytes(b.get(), size), src);
  ASSERT_EQ(cudaMemcpy(out.data(), b.get(), size, kD2H), 0);
  EXPECT_EQ(out, src);
  ASSERT_EQ(cudaMemcpy(host2.data(), out.data(), size, kH2H), 0);
  EXPECT_EQ(host2, src);
  // cudaMemcpyDefault infers each side from its address.
  auto other = pattern(size, 2);
  ASSERT_EQ(cudaMemcpy(a.get() + 5, other.data(), size - 5, kDefault), 0);
  ASSERT_EQ(cudaMemcpy(b.get(), a.get(), size, kDefault), 0);
  ASSERT_EQ(cudaMemcpy(out.data(), b.get() + 5, size - 5, kDefault), 0);
  EXPECT_TRUE(std::equal(other.begin(), other.end() - 5, out.begin()));
  EXPECT_EQ(device_bytes(b.get(), 5), std::vector<unsigned char>(src.begin(), src.begin() + 5));
  auto s = stats();
  EXPECT_EQ(s.sync_copies - before_.sync_copies, 7);
  EXPECT_EQ(s.d2d_copies - before_.d2d_copies, 2);
}

TEST_F(FakeCudart, CopiesOutsideOneAllocationOrAgainstTheirKindAreRefused) {
  DeviceMemory a(2 * kPage), b(2 * kPage);
  std::vector<unsigned char> host(4 * kPage);
  EXPECT_EQ(cudaMemcpy(a.get() + 1, host.data(), 2 * kPage, kH2D), kInvalidValue) << "runs past the end";
  EXPECT_EQ(cudaMemcpy(host.data(), a.get() + kPage, kPage + 1, kDefault), kInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), host.data() + kPage, 8, kH2D), kInvalidValue) << "dst is host memory";
  EXPECT_EQ(cudaMemcpy(host.data(), host.data() + kPage, 8, kD2H), kInvalidValue) << "src is host memory";
  EXPECT_EQ(cudaMemcpy(a.get(), host.data(), 8, kD2D), kInvalidValue);
  EXPECT_EQ(cudaMemcpy(a.get(), b.get(), 8, kH2H), kInvalidValue);
  EXPECT_EQ(cudaMemcpy(a.get(), b.get(), 8, 7), kInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(nullptr, host.data(), 8, kH2H), kInvalidValue);
  EXPECT_EQ(stats().sync_copies, before_.sync_copies) << "a refused copy is no copy";
}

TEST_F(FakeCudart, StreamCopiesAreInvisibleUntilSynchronized) {
  DeviceMemory d(kPage);
  void* stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, 1), 0);
  auto src = pattern(kPage, 3);
  std::vector<unsigned char> out(kPage, 0xee);
  ASSERT_EQ(cudaMemcpyAsync(d.get(), src.data(), kPage, kH2D, stream), 0);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), d.get(), kPage, kD2H, stream), 0);
  EXPECT_EQ(device_bytes(d.get(), kPage), std::vector<unsigned char>(kPage, 0)) << "not yet run";
  EXPECT_EQ(out, std::vector<unsigned char>(kPage, 0xee));
  EXPECT_EQ(cudaStreamQuery(stream), kNotReady);
  EXPECT_EQ(cudaStreamQuery(stream), kNotReady) << "querying runs nothing";
  ASSERT_EQ(cudaStreamSynchronize(stream), 0);
  EXPECT_EQ(cudaStreamQuery(stream), 0);
  EXPECT_EQ(out, src);
  EXPECT_EQ(stats().copies_unpinned - before_.copies_unpinned, 2);

  ASSERT_EQ(cudaMemcpyAsync(d.get(), out.data(), kPage, kDefault, stream), 0);
  ASSERT_EQ(cudaStreamDestroy(stream), 0);
  EXPECT_EQ(stats().copies_dropped - before_.copies_dropped, 1);
  EXPECT_EQ(cudaMemcpyAsync(d.get(), out.data(), 8, kH2D, stream), kInvalidHandle) << "destroyed stream";
}

TEST_F(FakeCudart, EventSynchronizeRunsItsStreamUpToTheRecord) {
  DeviceMemory d(2 * kPage);
  void *stream = nullptr, *event = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, 1), 0);
  ASSERT_EQ(cudaEventCreateWithFlags(&event, 2), 0);
  auto first = pattern(kPage, 4), second = pattern(kPage, 5);
  ASSERT_EQ(cudaMemcpyAsync(d.get(), first.data(), kPage, kH2D, stream), 0);
  ASSERT_EQ(cudaEventRecord(event, stream), 0);
  ASSERT_EQ(cudaMemcpyAsync(d.get() + kPage, second.data(), kPage, kH2D, stream), 0);
  EXPECT_EQ(cudaEventQuery(event), kNotReady);
  ASSERT_EQ(cudaEventSynchronize(event), 0);
  EXPECT_EQ(cudaEventQuery(event), 0);
  EXPECT_EQ(device_bytes(d.get(), kPage), first);
  EXPECT_EQ(device_bytes(d.get() + kPage, kPage), std::vector<unsigned char>(kPage, 0)) << "after the record";
  EXPECT_EQ(cudaStreamQuery(stream), kNotReady);
  ASSERT_EQ(cudaStreamSynchronize(stream), 0);
  EXPECT_EQ(device_bytes(d.get() + kPage, kPage), second);
  EXPECT_EQ(stats().events_alive, before_.events_alive + 1);
  ASSERT_EQ(cudaEventDestroy(event), 0);
  ASSERT_EQ(cudaStreamDestroy(stream), 0);
  EXPECT_EQ(cudaEventQuery(event), kInvalidHandle);
}

TEST_F(FakeCudart, StreamWaitEventOrdersACopyAfterAnotherStreamsCopy) {
  DeviceMemory d(kPage);
  void *upload = nullptr, *download = nullptr, *uploaded = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&upload, 1), 0);
  ASSERT_EQ(cudaStreamCreateWithFlags(&download, 1), 0);
  ASSERT_EQ(cudaEventCreateWithFlags(&uploaded, 2), 0);
  auto src = pattern(kPage, 9);
  std::vector<unsigned char> out(kPage);
  ASSERT_EQ(cudaMemcpyAsync(d.get(), src.data(), kPage, kH2D, upload), 0);
  ASSERT_EQ(cudaEventRecord(uploaded, upload), 0);
  ASSERT_EQ(cudaStreamWaitEvent(download, uploaded, 0), 0);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), d.get(), kPage, kD2H, download), 0);
  ASSERT_EQ(cudaStreamSynchronize(download), 0);  // runs the upload first, through the wait
  EXPECT_EQ(out, src);
  EXPECT_EQ(cudaStreamQuery(upload), 0);
  EXPECT_EQ(cudaEventDestroy(uploaded), 0);
  EXPECT_EQ(cudaStreamDestroy(upload), 0);
  EXPECT_EQ(cudaStreamDestroy(download), 0);
}

TEST_F(FakeCudart, PointerAttributesTellDeviceManagedPinnedAndPlainHost) {
  ASSERT_EQ(cudaSetDevice(1), 0);
  DeviceMemory d(1000);
  ASSERT_EQ(cudaSetDevice(0), 0);
  void *managed = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, 5000, 1), 0);
  ASSERT_EQ(cudaMallocHost(&pinned, 3000), 0);
  std::vector<unsigned char> plain(4096), registered(4096);
  ASSERT_EQ(cudaHostRegister(registered.data(), registered.size(), 0), 0);
  EXPECT_EQ(cudaHostRegister(registered.data() + 8, 8, 0), 712) << "already registered";

  cudaPointerAttributes at{};
  ASSERT_EQ(cudaPointerGetAttributes(&at, d.get() + 999), 0);
  EXPECT_EQ(at.type, 2);
  EXPECT_EQ(at.device, 1);
  EXPECT_EQ(at.hostPointer, nullptr);
  ASSERT_EQ(cudaPointerGetAttributes(&at, d.get() + 1000), 0);
  EXPECT_EQ(at.type, 0) << "one past the end is not the allocation";
  ASSERT_EQ(cudaPointerGetAttributes(&at, managed), 0);
  EXPECT_EQ(at.type, 3);
  static_cast<unsigned char*>(managed)[4999] = 1;  // host-accessible
  ASSERT_EQ(cudaPointerGetAttributes(&at, pinned), 0);
  EXPECT_EQ(at.type, 1);
  ASSERT_EQ(cudaPointerGetAttributes(&at, registered.data() + 4095), 0);
  EXPECT_EQ(at.type, 1);
  ASSERT_EQ(cudaPointerGetAttributes(&at, plain.data()), 0) << "unregistered host memory is no error";
  EXPECT_EQ(at.type, 0);

  EXPECT_EQ(cudaHostUnregister(registered.data()), 0);
  EXPECT_EQ(cudaHostUnregister(registered.data()), 713);
  EXPECT_EQ(cudaFreeHost(pinned), 0);
  EXPECT_EQ(cudaFree(managed), 0);
}

// The child opens the parent's handle, reads what the parent wrote, writes its own bytes and exits with
// the number of the first check that failed (0: all passed).
int ipc_child(const cudaIpcMemHandle_t& handle, std::size_t size, std::size_t offset) {
  void* opened = nullptr;
  if (cudaIpcOpenMemHandle(&opened, handle, 1) != 0) return 1;
  unsigned long long base = 0;
  std::size_t range = 0;
  if (cuMemGetAddressRange_v2(&base, &range, dptr(opened)) != 0 || base != dptr(opened) || range != size)
    return 2;  // the handle of an interior pointer opens the whole allocation, at its base
  void* again = nullptr;
  if (cudaIpcOpenMemHandle(&again, handle, 1) != 0 || again != opened) return 3;
  std::vector<unsigned char> seen(size);
  if (cudaMemcpy(seen.data(), opened, size, kD2H) != 0 || seen != pattern(size, 6)) return 4;
  auto mine = pattern(size - offset, 7);
  if (cudaMemcpy(static_cast<unsigned char*>(opened) + offset, mine.data(), mine.size(), kH2D) != 0) return 5;
  if (cudaIpcCloseMemHandle(again) != 0 || cudaIpcCloseMemHandle(opened) != 0) return 6;
  if (cudaIpcCloseMemHandle(opened) != kInvalidValue) return 7;
  FakeCudartStats s{};
  fake_cudart_stats(&s);
  return s.ipc_open_alive == 0 ? 0 : 8;
}

TEST_F(FakeCudart, IpcHandleOfAnInteriorPointerSharesTheWholeAllocationWithAnotherProcess) {
  const std::size_t size = 2 * kPage + 77, offset = 100;
  DeviceMemory d(size);
  auto mine = pattern(size, 6);
  ASSERT_EQ(cudaMemcpy(d.get(), mine.data(), size, kH2D), 0);
  cudaIpcMemHandle_t handle{};
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, d.get() + offset), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(ipc_child(handle, size, offset));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "failed check in the child";
  auto expected = mine;
  auto theirs = pattern(size - offset, 7);
  std::copy(theirs.begin(), theirs.end(), expected.begin() + offset);
  EXPECT_EQ(device_bytes(d.get(), size), expected);
}

TEST_F(FakeCudart, IpcHandlesOfThisProcessOrGarbageDoNotOpen) {
  DeviceMemory d(kPage);
  cudaIpcMemHandle_t handle{};
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, d.get()), 0);
  void* opened = nullptr;
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, handle, 1), kInvalidContext) << "its own handle";
  cudaIpcMemHandle_t zeros{};
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, zeros, 1), kInvalidHandle);
  cudaIpcMemHandle_t noise;
  for (std::size_t i = 0; i < sizeof noise.reserved; ++i) noise.reserved[i] = static_cast<char>(i * 37 + 11);
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, noise, 1), kInvalidHandle);
  // A well-formed handle whose pid or fd names something else: a parent's stdin, another process's fds.
  int pid_at = 8, fd_at = 12;
  cudaIpcMemHandle_t other_pid = handle, other_fd = handle;
  int parent = static_cast<int>(::getppid()), zero = 0;
  std::memcpy(other_pid.reserved + pid_at, &parent, sizeof parent);
  std::memcpy(other_fd.reserved + fd_at, &zero, sizeof zero);
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, other_pid, 1), kInvalidHandle);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(cudaIpcOpenMemHandle(&opened, other_fd, 1) == kInvalidHandle ? 0 : 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "fd 0 of the parent is no allocation";
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, &status), kInvalidValue) << "host memory has no IPC handle";
}

TEST_F(FakeCudart, DriverAnswersAddressRangesAndPointerAttributes) {
  ASSERT_EQ(cudaSetDevice(1), 0);
  DeviceMemory d(3 * kPage + 5);
  ASSERT_EQ(cudaSetDevice(0), 0);
  unsigned long long base = 0;
  std::size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, dptr(d.get()) + 2 * kPage), 0);
  EXPECT_EQ(base, dptr(d.get()));
  EXPECT_EQ(size, 3 * kPage + 5);
  int host = 0;
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, dptr(&host)), kNotFound);

  unsigned memory_type = 0, managed = 7;
  int ordinal = -1;
  unsigned long long start = 0;
  std::size_t range = 0;
  auto at = dptr(d.get()) + 17;
  ASSERT_EQ(cuPointerGetAttribute(&memory_type, 2, at), 0);
  ASSERT_EQ(cuPointerGetAttribute(&managed, 8, at), 0);
  ASSERT_EQ(cuPointerGetAttribute(&ordinal, 9, at), 0);
  ASSERT_EQ(cuPointerGetAttribute(&start, 11, at), 0);
  ASSERT_EQ(cuPointerGetAttribute(&range, 12, at), 0);
  EXPECT_EQ(memory_type, 2u);
  EXPECT_EQ(managed, 0u);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(start, dptr(d.get()));
  EXPECT_EQ(range, 3 * kPage + 5);
  EXPECT_EQ(cuPointerGetAttribute(&memory_type, 2, dptr(&host)), kInvalidValue);

  void* um = nullptr;
  ASSERT_EQ(cudaMallocManaged(&um, 100, 1), 0);
  ASSERT_EQ(cuPointerGetAttribute(&managed, 8, dptr(um)), 0);
  ASSERT_EQ(cuPointerGetAttribute(&memory_type, 2, dptr(um)), 0);
  EXPECT_EQ(managed, 1u);
  EXPECT_EQ(memory_type, 2u) << "CU_MEMORYTYPE_DEVICE, IS_MANAGED set";
  EXPECT_EQ(cudaFree(um), 0);

  int supported = -1;
  ASSERT_EQ(cuDeviceGetAttribute(&supported, 124, 0), 0);
  EXPECT_EQ(supported, 1);
  fake_cudart_set_dmabuf_supported(0);
  ASSERT_EQ(cuDeviceGetAttribute(&supported, 124, 1), 0);
  EXPECT_EQ(supported, 0);
  EXPECT_EQ(cuDeviceGetAttribute(&supported, 124, 2), 101) << "no device 2";
  const char* text = nullptr;
  ASSERT_EQ(cuGetErrorString(500, &text), 0);
  EXPECT_STREQ(text, "named symbol not found");
  EXPECT_EQ(cuGetErrorString(123456, &text), kInvalidValue);
  EXPECT_EQ(text, nullptr);
}

TEST_F(FakeCudart, DmabufExportIsANewMemfdOfTheWholeAllocation) {
  DeviceMemory d(2 * kPage + 1);
  auto bytes = pattern(2 * kPage + 1, 8);
  ASSERT_EQ(cudaMemcpy(d.get(), bytes.data(), bytes.size(), kH2D), 0);
  int fd = -1;
  ASSERT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(d.get()), 3 * kPage, 1, 0), 0);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), 3 * kPage);
  char target[128] = {};
  ASSERT_GT(::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target - 1), 0);
  EXPECT_EQ(std::string(target).rfind("/memfd:", 0), 0u) << target;
  void* mapped = ::mmap(nullptr, 3 * kPage, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  EXPECT_EQ(std::memcmp(mapped, bytes.data(), bytes.size()), 0) << "the fd holds the device bytes";
  ::munmap(mapped, 3 * kPage);
  ::close(fd);
  EXPECT_EQ(stats().dmabuf_exports - before_.dmabuf_exports, 1);

  EXPECT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(d.get()) + 1, 2 * kPage, 1, 0), kInvalidValue);
  EXPECT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(d.get()), 2 * kPage + 1, 1, 0), kInvalidValue);
  EXPECT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(d.get()), 4 * kPage, 1, 0), kInvalidValue)
      << "past the end";
  EXPECT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(d.get()) + kPage, kPage, 1, 0), kNotSupported);
  EXPECT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(d.get()), 3 * kPage, 2, 0), kInvalidValue);
  std::vector<unsigned char> host(3 * kPage);
  EXPECT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(host.data()), kPage, 1, 0), kInvalidValue);
  fake_cudart_set_dmabuf_supported(0);
  EXPECT_EQ(cuMemGetHandleForAddressRange(&fd, dptr(d.get()), 3 * kPage, 1, 0), kNotSupported);
  EXPECT_EQ(stats().dmabuf_exports - before_.dmabuf_exports, 1);
}

TEST_F(FakeCudart, AnyExportedFunctionFailsOnCommandOnce) {
  DeviceMemory d(kPage);
  fake_cudart_fail("cuMemGetAddressRange_v2", 1, 999);
  unsigned long long base = 0;
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, nullptr, dptr(d.get())), 0);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, nullptr, dptr(d.get())), 999);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, nullptr, dptr(d.get())), 0);
  fake_cudart_fail("cudaMalloc", 0, 2);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, kPage), 2);
  EXPECT_EQ(stats().device_allocations, before_.device_allocations + 1) << "a failed call does nothing";
}

}  // namespace
