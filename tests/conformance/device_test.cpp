// Device memory (issue #26): regions of CUDA device memory on one or both sides, against the fake CUDA
// runtime and driver (tests/fake_cudart/), which the library loads as it would load the real ones. The
// fake's device memory faults when the CPU touches it, so a transport that treats it as host memory crashes
// here; the test itself fills and checks it through the fake's own view (fake_cudart_host_view).
//
// Each transport moves device memory along its path (tcp and fault:tcp: staged through host memory; shm:
// CUDA IPC, the initiator copying with the runtime; verbs: GPUDirect where the NIC and driver have it, else
// staged through a pinned bounce buffer, local side only) or refuses to register it with an error naming
// itself. The table below says which: a transport that changes fails here until the table does too. verbs
// runs in the Soft-RoCE VM, whose rxe has no GPUDirect: staged, and a device region offered for remote access
// is refused there (one-sided access to it cannot work without GPUDirect), naming the missing driver.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <optional>

#include "conformance/fixture.hpp"
#include "fake_cudart/fake_cudart.hpp"

namespace rdmakit::conformance {
namespace {

using testing::fill_pattern;
using testing::find_pattern_mismatch;

std::optional<MemoryPath> expected_path(const std::string& transport) {
  if (transport == "tcp" || transport == "fault:tcp") return MemoryPath::Staged;
  if (transport == "shm") return MemoryPath::CudaIpc;
  if (transport == "verbs") return MemoryPath::Staged;  // rxe: no GPUDirect
  return std::nullopt;                                  // refused
}

// Whether a device region may grant a remote right (be the target of a one-sided operation): not over verbs
// without GPUDirect, where only the local side of an operation is staged.
bool remote_device_memory(const std::string& transport) { return transport != "verbs"; }

// A transport without a path: its refusal is what DeviceRegionsTakeTheTransportPathOrAreRefused checks.
#define SKIP_UNLESS_A_PATH()                                                       \
  if (!expected_path(GetParam()))                                                  \
  GTEST_SKIP() << GetParam() << " has no path for device memory yet (issue #26): " \
               << "DeviceRegionsTakeTheTransportPathOrAreRefused checks that it refuses it"

// The fake sits beside the test binaries (build/tests/libfake_cudart.so), in the build tree and in the VM.
struct Fake {
  Fake() {
    char exe[PATH_MAX] = {};
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    std::string dir = n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : std::string(".");
    path = dir.substr(0, dir.rfind('/')) + "/libfake_cudart.so";
    ::setenv("RDMAKIT_CUDA_RUNTIME", path.c_str(), 1);
    ::setenv("RDMAKIT_CUDA_DRIVER", path.c_str(), 1);
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    view = reinterpret_cast<decltype(view)>(::dlsym(handle, "fake_cudart_host_view"));
    stats = reinterpret_cast<decltype(stats)>(::dlsym(handle, "fake_cudart_stats"));
    fail = reinterpret_cast<decltype(fail)>(::dlsym(handle, "fake_cudart_fail"));
  }
  std::string path;
  void* handle = nullptr;
  void* (*view)(const void*) = nullptr;
  void (*stats)(FakeCudartStats*) = nullptr;
  void (*fail)(const char*, int, int) = nullptr;
};

Fake& fake() {
  static Fake instance;
  return instance;
}

class DeviceConformance : public Conformance {
 protected:
  void SetUp() override {
    ASSERT_NE(fake().handle, nullptr) << fake().path << ": " << ::dlerror();
    Conformance::SetUp();
  }
  // Device memory of `size` bytes on `context`: allocate(MemoryKind::Cuda), or (every other call) an
  // interior range of a larger cudaMalloc'ed allocation registered by the caller, as a caching allocator
  // hands out. Null when the transport refused it (the error is in `refusal`).
  std::shared_ptr<MemoryRegion> device_region(Context& context, std::size_t size, Access access) {
    if (device_count_++ % 2 == 0) {
      auto allocated = context.allocate(size, access, MemoryKind::Cuda);
      if (!allocated) refusal = allocated.error();
      return allocated ? *allocated : nullptr;
    }
    auto block = context.allocate(size + 8192, Access::LocalWrite, MemoryKind::Cuda);
    if (!block) {
      refusal = block.error();
      return nullptr;
    }
    blocks_.push_back(*block);
    auto* inside = static_cast<std::byte*>((*block)->data()) + 4096;
    auto registered = context.register_memory(inside, size, access, MemoryKind::Cuda);
    if (!registered) refusal = registered.error();
    return registered ? *registered : nullptr;
  }
  // The bytes of a region as the test may touch them.
  static std::byte* bytes(const MemoryRegion& region) {
    if (region.kind() == MemoryKind::Host) return static_cast<std::byte*>(region.data());
    return static_cast<std::byte*>(fake().view(region.data()));
  }
  std::shared_ptr<MemoryRegion> any_region(Context& context, bool device, std::size_t size, Access access) {
    return device ? device_region(context, size, access) : region(context, size, access);
  }

  Error refusal{Errc::Unavailable, "none"};
  std::vector<std::shared_ptr<MemoryRegion>> blocks_;
  int device_count_ = 0;
};

TEST_P(DeviceConformance, DeviceRegionsTakeTheTransportPathOrAreRefused) {
  auto context = open_context(true);
  ASSERT_TRUE(context);
  auto declared = expected_path(GetParam());
  EXPECT_EQ(context->capabilities().device_memory_path, declared ? to_string(*declared) : "none");
  for (int i = 0; i < 2; ++i) {
    auto region = device_region(*context, 65536, Access::All);
    auto path = expected_path(GetParam());
    if (path && !remote_device_memory(GetParam())) {
      ASSERT_FALSE(region) << GetParam() << " offered device memory for remote access without GPUDirect";
      EXPECT_EQ(refusal.code(), Errc::NotSupported) << refusal.describe();
      for (const char* named : {"verbs", "nvidia_peermem", "dmabuf"})
        EXPECT_NE(refusal.message().find(named), std::string::npos) << named << ": " << refusal.message();
      region = device_region(*context, 65536, Access::LocalWrite);  // the local side of operations: staged
    }
    if (!path) {
      ASSERT_FALSE(region) << GetParam() << " registered device memory: update expected_path";
      EXPECT_EQ(refusal.code(), Errc::NotSupported) << refusal.describe();
      EXPECT_NE(refusal.message().find(std::string(context->transport())), std::string::npos)
          << refusal.message();
      continue;
    }
    ASSERT_TRUE(region) << refusal.describe();
    EXPECT_EQ(region->kind(), MemoryKind::Cuda);
    EXPECT_EQ(region->device(), 0);
    EXPECT_EQ(region->path(), *path) << to_string(region->path());
  }
  if (expected_path(GetParam()) != MemoryPath::Staged) return;
  // gpu_path=direct refuses a staged registration, naming the option.
  Options direct;
  direct.gpu_path = "direct";
  auto strict = open_context(true, direct);
  ASSERT_TRUE(strict);
  auto refused = device_region(*strict, 4096, Access::LocalWrite);
  ASSERT_FALSE(refused) << "gpu_path=direct accepted the staged path";
  EXPECT_EQ(refusal.code(), Errc::NotSupported) << refusal.describe();
  EXPECT_NE(refusal.message().find("gpu_path=direct"), std::string::npos) << refusal.message();
}

// WRITE then READ back, device memory on the initiator, the target, or both, every byte checked and the
// bytes around the target range untouched.
TEST_P(DeviceConformance, WriteAndReadLandExactlyInDeviceMemoryEitherSide) {
  SKIP_UNLESS_A_PATH();
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  constexpr std::size_t kGuard = 64;
  for (auto [client_device, server_device] : {std::pair{true, true}, {true, false}, {false, true}}) {
    if (server_device && !remote_device_memory(GetParam())) continue;  // the target needs GPUDirect
    for (std::size_t size : {std::size_t{1}, std::size_t{4099}, std::size_t{(1 << 20) + 7}}) {
      SCOPED_TRACE("client " + std::string(client_device ? "device" : "host") + ", server " +
                   (server_device ? "device" : "host") + ", " + std::to_string(size) + " bytes");
      const std::size_t span = size + 2 * kGuard;
      auto source = any_region(*client_.context, client_device, span, Access::LocalWrite);
      auto sink = any_region(*client_.context, client_device, span, Access::LocalWrite);
      auto target = any_region(*server_.context, server_device, span,
                               Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
      ASSERT_TRUE(source && sink && target) << refusal.describe();
      auto seed = static_cast<std::uint32_t>(size) + (client_device ? 1 : 0) + (server_device ? 2 : 0);
      fill_pattern(bytes(*source) + 3, size, seed);
      std::memset(bytes(*target), 0, span);
      std::memset(bytes(*sink), 0, span);
      auto wrote = RDMAKIT_ASSERT_OK(client_.connection->write(
          source->slice(3, static_cast<std::uint32_t>(size)), target->descriptor().at(kGuard)));
      ASSERT_EQ(wait(*client_.connection, wrote).status, Status::Success);
      ASSERT_EQ(find_pattern_mismatch(bytes(*target) + kGuard, size, seed), size);
      for (std::size_t i = 0; i < kGuard; ++i) {
        ASSERT_EQ(bytes(*target)[i], std::byte{0}) << "before the target range, byte " << i;
        ASSERT_EQ(bytes(*target)[kGuard + size + i], std::byte{0}) << "after the target range, byte " << i;
      }
      auto read = RDMAKIT_ASSERT_OK(client_.connection->read(
          sink->slice(kGuard + 1, static_cast<std::uint32_t>(size)), target->descriptor().at(kGuard)));
      Completion done = wait(*client_.connection, read);
      ASSERT_EQ(done.status, Status::Success) << to_string(done.status);
      EXPECT_EQ(done.bytes, size);
      ASSERT_EQ(find_pattern_mismatch(bytes(*sink) + kGuard + 1, size, seed), size);
      EXPECT_EQ(bytes(*sink)[kGuard], std::byte{0});
      EXPECT_EQ(bytes(*sink)[kGuard + 1 + size], std::byte{0});
    }
  }
}

// A SEND from device memory into a receive posted in device memory, scattered over two segments.
TEST_P(DeviceConformance, SendLandsInAReceivePostedInDeviceMemory) {
  SKIP_UNLESS_A_PATH();
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  constexpr std::size_t kSize = 100'003;
  auto source = device_region(*client_.context, kSize, Access::LocalWrite);
  auto sink = device_region(*server_.context, kSize + 10, Access::LocalWrite);
  ASSERT_TRUE(source && sink) << refusal.describe();
  fill_pattern(bytes(*source), kSize, 77);
  std::memset(bytes(*sink), 0, kSize + 10);
  std::array<Segment, 2> halves{sink->slice(0, 50'000), sink->slice(50'010, kSize - 50'000)};
  auto posted = RDMAKIT_ASSERT_OK(server_.connection->post_recv(halves));
  auto sent = RDMAKIT_ASSERT_OK(client_.connection->send(source->slice(0, kSize)));
  ASSERT_EQ(wait(*client_.connection, sent).status, Status::Success);
  Completion received = wait(*server_.connection, posted);
  ASSERT_EQ(received.status, Status::Success) << to_string(received.status);
  EXPECT_EQ(received.bytes, kSize);
  std::vector<std::byte> joined(kSize);
  std::memcpy(joined.data(), bytes(*sink), 50'000);
  std::memcpy(joined.data() + 50'000, bytes(*sink) + 50'010, kSize - 50'000);
  EXPECT_EQ(find_pattern_mismatch(joined.data(), kSize, 77), kSize);
  for (std::size_t i = 50'000; i < 50'010; ++i) EXPECT_EQ(bytes(*sink)[i], std::byte{0}) << "gap byte " << i;
}

// Atomics on a word of device memory, their results landing in device memory.
TEST_P(DeviceConformance, AtomicsOnDeviceMemorySumAndSwapExactly) {
  SKIP_UNLESS_A_PATH();
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  // Without GPUDirect (verbs on rxe) the word is host memory and the results land in device memory.
  const Access word_access = Access::LocalWrite | Access::RemoteAtomic;
  auto word = remote_device_memory(GetParam()) ? device_region(*server_.context, 64, word_access)
                                               : region(*server_.context, 64, word_access);
  auto result = device_region(*client_.context, 64, Access::LocalWrite);
  ASSERT_TRUE(word && result) << refusal.describe();
  std::uint64_t start = 1000;
  std::memcpy(bytes(*word) + 8, &start, 8);
  std::uint64_t expected_old = start;
  for (std::uint64_t add = 1; add <= 20; ++add) {
    auto id =
        RDMAKIT_ASSERT_OK(client_.connection->fetch_add(result->slice(16, 8), word->descriptor().at(8), add));
    ASSERT_EQ(wait(*client_.connection, id).status, Status::Success);
    std::uint64_t old = 0;
    std::memcpy(&old, bytes(*result) + 16, 8);
    ASSERT_EQ(old, expected_old) << "fetch_add " << add << " returned the wrong old value";
    expected_old += add;
  }
  auto swapped = RDMAKIT_ASSERT_OK(
      client_.connection->compare_swap(result->slice(24, 8), word->descriptor().at(8), expected_old, 42));
  ASSERT_EQ(wait(*client_.connection, swapped).status, Status::Success);
  auto missed = RDMAKIT_ASSERT_OK(
      client_.connection->compare_swap(result->slice(32, 8), word->descriptor().at(8), 7, 99));
  ASSERT_EQ(wait(*client_.connection, missed).status, Status::Success);
  std::uint64_t now = 0, first = 0, second = 0;
  std::memcpy(&now, bytes(*word) + 8, 8);
  std::memcpy(&first, bytes(*result) + 24, 8);
  std::memcpy(&second, bytes(*result) + 32, 8);
  EXPECT_EQ(now, 42u) << "the matching compare_swap did not swap, or the missing one did";
  EXPECT_EQ(first, expected_old);
  EXPECT_EQ(second, 42u);
}

// verbs without GPUDirect: the staged path's own promises. Device copies go through pinned memory on the
// library's stream, in chunks; an unsignaled READ into device memory has landed when a later completion of
// its queue is seen; a failed device copy fails the post (WRITE, nothing sent, the connection still usable)
// or the completion (READ, GeneralError, the device memory untouched).
TEST_P(DeviceConformance, VerbsStagedCopiesArePinnedChunkedAndFailuresReachTheCaller) {
  if (GetParam() != "verbs") GTEST_SKIP() << "the staged bounce buffers of verbs";
  ASSERT_TRUE(fake().stats && fake().fail);
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  constexpr std::size_t kSize = (3u << 20) + 5;  // four chunks of the default 1 MiB
  auto source = device_region(*client_.context, kSize, Access::LocalWrite);
  auto sink = device_region(*client_.context, kSize, Access::LocalWrite);
  auto target =
      region(*server_.context, kSize, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
  auto small = region(*client_.context, 64, Access::LocalWrite);
  ASSERT_TRUE(source && sink && target && small) << refusal.describe();
  ASSERT_EQ(sink->path(), MemoryPath::Staged);
  fill_pattern(bytes(*source), kSize, 91);
  std::memset(bytes(*sink), 0, kSize);
  FakeCudartStats before{}, after{};
  fake().stats(&before);
  auto wrote = RDMAKIT_ASSERT_OK(client_.connection->write(
      source->slice(0, static_cast<std::uint32_t>(kSize)), target->descriptor().at(0)));
  ASSERT_EQ(wait(*client_.connection, wrote).status, Status::Success);
  fake().stats(&after);
  ASSERT_EQ(find_pattern_mismatch(bytes(*target), kSize, 91), kSize);
  EXPECT_GE(after.copies - before.copies, 4) << "one copy per staging_chunk";
  EXPECT_EQ(after.copies_unpinned, before.copies_unpinned) << "the bounce buffer is not pinned";
  EXPECT_EQ(after.copies_default_stream, before.copies_default_stream) << "copies on the legacy stream";

  // An unsignaled READ into device memory, then a signaled WRITE: its completion settles the READ first.
  Segment into = sink->slice(0, static_cast<std::uint32_t>(kSize));
  Segment tiny = small->slice(0, 8);
  WorkRequest chain[2] = {WorkRequest{.opcode = Opcode::Read,
                                      .local = std::span(&into, 1),
                                      .remote = target->descriptor().at(0),
                                      .signaled = false},
                          WorkRequest{.opcode = Opcode::Write,
                                      .local = std::span(&tiny, 1),
                                      .remote = target->descriptor().at(8),
                                      .signaled = true}};
  auto first = RDMAKIT_ASSERT_OK(client_.connection->post(chain));
  ASSERT_EQ(wait(*client_.connection, first + 1).status, Status::Success);
  ASSERT_EQ(find_pattern_mismatch(bytes(*sink), kSize, 91), kSize) << "the unsignaled READ did not land";

  // Device memory registered without LocalWrite takes no READ: the NIC would refuse it, so does the copy.
  auto read_only = device_region(*client_.context, 4096, Access::None);
  ASSERT_TRUE(read_only) << refusal.describe();
  std::memset(bytes(*read_only), 0x5a, 4096);
  auto unwritable = client_.connection->read(read_only->slice(0, 4096), target->descriptor().at(0));
  ASSERT_FALSE(unwritable) << "a READ into device memory without LocalWrite was posted";
  EXPECT_EQ(unwritable.error().code(), Errc::InvalidArgument) << unwritable.error().describe();
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(bytes(*read_only)[i], std::byte{0x5a}) << "byte " << i;

  // A device copy that fails at post: the WRITE is refused, naming the copy, and the connection goes on.
  fake().fail("cudaMemcpyAsync", 0, 1);
  auto refused = client_.connection->write(source->slice(0, 4096), target->descriptor().at(0));
  ASSERT_FALSE(refused) << "a WRITE whose device copy failed was posted";
  EXPECT_NE(refused.error().message().find("cudaMemcpyAsync"), std::string::npos)
      << refused.error().message();
  auto again =
      RDMAKIT_ASSERT_OK(client_.connection->write(source->slice(0, 4096), target->descriptor().at(0)));
  ASSERT_EQ(wait(*client_.connection, again).status, Status::Success);

  // A device copy that fails after a READ landed in the bounce buffer: the completion says so and the
  // device memory is untouched.
  std::memset(bytes(*sink), 0, kSize);
  fake().fail("cudaMemcpyAsync", 0, 1);
  auto read = RDMAKIT_ASSERT_OK(client_.connection->read(sink->slice(0, 4096), target->descriptor().at(0)));
  EXPECT_EQ(wait(*client_.connection, read).status, Status::GeneralError);
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(bytes(*sink)[i], std::byte{0}) << "byte " << i;
}

// tcp (and fault:tcp over it): a payload bound for device memory is received chunk by chunk through the
// context's pinned slots, each copied with cudaMemcpyAsync while the next fills; one whose source is device
// memory is copied out into a pinned buffer with asynchronous copies before it is sent. The fake runs a
// queued copy only when its event or stream is waited for, so a slot refilled before its copy ran would
// deliver the later chunk's bytes: every byte checked, over 16 chunks through 2 slots. A copy that fails
// mid-payload fails that WRITE or READ (not the bytes of the next message), and the connection is torn down
// as for any remote error.
TEST_P(DeviceConformance, TcpStagedPayloadsArePipelinedThroughPinnedChunks) {
  if (GetParam() != "tcp" && GetParam() != "fault:tcp") GTEST_SKIP() << "the tcp receive ring";
  ASSERT_TRUE(fake().stats && fake().fail);
  Options small_chunks;
  small_chunks.set("device_chunk", "65536");
  client_.context = open_context(false, small_chunks);
  server_.context = open_context(true, small_chunks);
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  constexpr std::size_t kSize = (1u << 20) + 4099;  // 17 chunks of 64 KiB
  auto source = region(*client_.context, kSize, Access::LocalWrite);
  auto sink = device_region(*client_.context, kSize, Access::LocalWrite);
  auto target =
      device_region(*server_.context, kSize, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
  ASSERT_TRUE(source && sink && target) << refusal.describe();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto seed = static_cast<std::uint32_t>(500 + round);
    fill_pattern(bytes(*source), kSize, seed);
    FakeCudartStats before{}, after{};
    fake().stats(&before);
    auto wrote = RDMAKIT_ASSERT_OK(client_.connection->write(
        source->slice(0, static_cast<std::uint32_t>(kSize)), target->descriptor().at(0)));
    ASSERT_EQ(wait(*client_.connection, wrote).status, Status::Success);
    ASSERT_EQ(find_pattern_mismatch(bytes(*target), kSize, seed), kSize) << "a slot was refilled too early";
    auto read = RDMAKIT_ASSERT_OK(client_.connection->read(sink->slice(0, static_cast<std::uint32_t>(kSize)),
                                                           target->descriptor().at(0)));
    ASSERT_EQ(wait(*client_.connection, read).status, Status::Success);
    ASSERT_EQ(find_pattern_mismatch(bytes(*sink), kSize, seed), kSize) << "the READ's response";
    // And back from device memory to device memory: the WRITE's source is staged out too.
    std::memset(bytes(*target), 0, kSize);
    auto back = RDMAKIT_ASSERT_OK(client_.connection->write(sink->slice(0, static_cast<std::uint32_t>(kSize)),
                                                            target->descriptor().at(0)));
    ASSERT_EQ(wait(*client_.connection, back).status, Status::Success);
    ASSERT_EQ(find_pattern_mismatch(bytes(*target), kSize, seed), kSize) << "the WRITE from device memory";
    fake().stats(&after);
    // The WRITE lands in 17 copies; the READ's response leaves the server through copies out of device
    // memory into a pinned buffer and lands in 17 more; the device-to-device WRITE takes both ways again.
    EXPECT_GE(after.copies - before.copies, 3 * 17 + 2) << "not copied chunk by chunk";
    EXPECT_EQ(after.copies_unpinned, before.copies_unpinned) << "a staging buffer is not pinned";
    EXPECT_EQ(after.copies_default_stream, before.copies_default_stream) << "copies on the legacy stream";
    EXPECT_EQ(after.sync_copies, before.sync_copies) << "a synchronous cudaMemcpy on the staged path";
  }

  // The third chunk's copy fails: the WRITE fails, naming nothing of the bytes after it, and no byte of a
  // later chunk reached the device (the copies behind a failure are not queued).
  std::memset(bytes(*target), 0, kSize);
  fill_pattern(bytes(*source), kSize, 9);
  fake().fail("cudaMemcpyAsync", 2, 1);
  auto failing = RDMAKIT_ASSERT_OK(client_.connection->write(
      source->slice(0, static_cast<std::uint32_t>(kSize)), target->descriptor().at(0)));
  Completion failed = wait(*client_.connection, failing);
  EXPECT_NE(failed.status, Status::Success) << "a WRITE whose device copy failed completed";
  for (std::size_t i = 3 * 65536; i < kSize; ++i)
    ASSERT_EQ(bytes(*target)[i], std::byte{0}) << "byte " << i << " landed after the failed copy";

  // A new connection between the same contexts reuses the slots; the copy of a READ's response fails at
  // its event this time.
  client_.connection.reset();
  server_.connection.reset();
  connect_pair(client_, server_);
  ASSERT_TRUE(client_.connection);
  fill_pattern(bytes(*target), kSize, 10);
  std::memset(bytes(*sink), 0, kSize);
  fake().fail("cudaEventSynchronize", 1, 1);
  auto read = RDMAKIT_ASSERT_OK(client_.connection->read(sink->slice(0, static_cast<std::uint32_t>(kSize)),
                                                         target->descriptor().at(0)));
  Completion done = wait(*client_.connection, read);
  EXPECT_EQ(done.status, Status::LocalProtection) << to_string(done.status);
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceConformance, ::testing::ValuesIn(conformance_transports()),
                         transport_param_name);

}  // namespace
}  // namespace rdmakit::conformance
