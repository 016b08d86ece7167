// Transfer-engine segments and local memory in CUDA device memory, against the fake CUDA runtime and driver
// (tests/fake_cudart/: device memory the CPU cannot touch, read and written here through
// fake_cudart_host_view):
// - KV blocks of mixed sizes move VRAM -> VRAM between two engines over tcp (staged), every byte checked;
// - a transport that refuses device memory is left out for that memory: a device segment of an engine with
//   rails {shm, tcp} offers only the rails that registered it and is reached over one of those; a request
//   between device memory and a segment reached over a refusing transport is refused at submit, naming it;
// - with no rail that takes it, allocate_segment / publish / register_local fail naming each refusal;
// - file segments READ into and WRITE from device memory over tcp and shm, every byte checked.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "fake_cudart/fake_cudart.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/xfer/broadcast.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;

// The fake, through the same handle the library's dlopen gets (one library, one state). The environment
// is set before any context exists, i.e. before the library first needs CUDA.
struct Fake {
  Fake() {
    ::setenv("RDMAKIT_CUDA_RUNTIME", fake_cudart_file(), 1);
    ::setenv("RDMAKIT_CUDA_DRIVER", fake_cudart_file(), 1);
    handle = ::dlopen(fake_cudart_file(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    reinterpret_cast<void (*)(int)>(::dlsym(handle, "fake_cudart_reset"))(1);
    malloc = reinterpret_cast<decltype(malloc)>(::dlsym(handle, "cudaMalloc"));
    free = reinterpret_cast<decltype(free)>(::dlsym(handle, "cudaFree"));
    view = reinterpret_cast<decltype(view)>(::dlsym(handle, "fake_cudart_host_view"));
    stats = reinterpret_cast<decltype(stats)>(::dlsym(handle, "fake_cudart_stats"));
  }
  FakeCudartStats now() const {
    FakeCudartStats s{};
    stats(&s);
    return s;
  }
  void* handle = nullptr;
  void (*stats)(FakeCudartStats*) = nullptr;
  int (*malloc)(void**, std::size_t) = nullptr;
  int (*free)(void*) = nullptr;
  void* (*view)(const void*) = nullptr;
};

Fake& fake() {
  static Fake instance;
  return instance;
}

// Device memory of the fake, freed at scope exit; bytes() is the fake's host view of it.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t size) { EXPECT_EQ(fake().malloc(&data_, size), 0); }
  ~DeviceBuffer() { fake().free(data_); }
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  std::byte* bytes() const { return static_cast<std::byte*>(fake().view(data_)); }

 private:
  void* data_ = nullptr;
};

// Whether `transport` takes device memory (it may gain a path while this test stays right).
bool takes_device_memory(const char* transport) {
  auto context = Context::open(Options{.transport = transport});
  if (!context) return false;
  DeviceBuffer probe(4096);
  return (*context)->register_memory(probe.data(), 4096, Access::All, MemoryKind::Cuda).has_value();
}

EngineOptions options(std::string name, std::vector<std::string> transports) {
  return EngineOptions{
      .name = std::move(name), .transports = std::move(transports), .connections_per_rail = 2};
}

// 64 KV blocks of 16-256 KiB (multiples of 4 KiB, mixed), placed at shuffled slots of the segment.
struct Blocks {
  std::vector<std::uint64_t> size, local, remote;
  std::uint64_t total = 0;
};
Blocks kv_blocks() {
  Blocks b;
  std::mt19937 random(26);
  for (int i = 0; i < 64; ++i) {
    b.size.push_back((4 + random() % 61) * 4096);
    b.local.push_back(b.total);
    b.total += b.size.back();
  }
  std::vector<std::size_t> order(64);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  std::uint64_t at = 0;
  b.remote.resize(64);
  for (auto i : order) b.remote[i] = at, at += b.size[i];
  return b;
}

class XferDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(fake().handle, nullptr) << fake_cudart_file() << ": " << ::dlerror();
    metadata_ = std::make_unique<FileMetadataStore>(dir_.path());
  }
  // Moves every block `op` between `local` and the segment, and checks every request succeeded.
  void run(Engine& client, Op op, std::byte* local, SegmentHandle segment, const Blocks& b) {
    std::vector<Request> requests;
    for (std::size_t i = 0; i < b.size.size(); ++i)
      requests.push_back({op, local + b.local[i], segment, b.remote[i], b.size[i]});
    auto batch = client.submit(requests);
    ASSERT_TRUE(batch) << batch.error().describe();
    ASSERT_TRUE((*batch)->wait(10s));
    for (std::size_t i = 0; i < requests.size(); ++i) {
      auto status = (*batch)->status(i);
      ASSERT_TRUE(status && status->has_value())
          << "request " << i << ": " << (status ? status->error().describe() : "");
    }
  }

  TempDir dir_;
  std::unique_ptr<MetadataStore> metadata_;
};

void fill(std::byte* bytes, std::size_t size, unsigned seed) {
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) >> 3);
}

// Every block's bytes at its slot of the segment equal the source's.
void expect_blocks(const std::byte* local, const std::byte* segment, const Blocks& b) {
  for (std::size_t i = 0; i < b.size.size(); ++i)
    ASSERT_EQ(std::memcmp(local + b.local[i], segment + b.remote[i], b.size[i]), 0) << "block " << i;
}

TEST_F(XferDevice, KvBlocksMoveVramToVramOverTcpEveryByteChecked) {
  auto owner = make_engine(*metadata_, options("owner", {"tcp"}));
  auto client = make_engine(*metadata_, options("client", {"tcp"}));
  ASSERT_TRUE(owner && client);
  auto b = kv_blocks();
  auto segment = owner->allocate_segment("kv-vram", b.total, MemoryKind::Cuda);
  ASSERT_TRUE(segment) << segment.error().describe();
  auto* segment_view = static_cast<std::byte*>(fake().view(segment->data()));
  ASSERT_NE(segment_view, nullptr) << "allocate_segment(Cuda) did not allocate device memory";
  std::memset(segment_view, 0, b.total);
  DeviceBuffer source(b.total), sink(b.total);
  fill(source.bytes(), b.total, 7);
  std::memset(sink.bytes(), 0xee, b.total);
  ASSERT_TRUE(client->register_local(source.data(), b.total, MemoryKind::Cuda));
  ASSERT_TRUE(client->register_local(sink.data(), b.total));  // Auto detects it
  auto handle = client->open_segment("kv-vram");
  ASSERT_TRUE(handle) << handle.error().describe();

  run(*client, Op::Write, source.data(), *handle, b);
  expect_blocks(source.bytes(), segment_view, b);
  run(*client, Op::Read, sink.data(), *handle, b);
  expect_blocks(sink.bytes(), segment_view, b);
  EXPECT_EQ(std::memcmp(source.bytes(), sink.bytes(), b.total), 0);
}

TEST_F(XferDevice, DeviceSegmentIsReachedOnlyOverRailsThatRegisteredIt) {
  const bool shm_takes = takes_device_memory("shm");
  auto owner = make_engine(*metadata_, options("owner", {"shm", "tcp"}));
  auto client = make_engine(*metadata_, options("client", {"shm", "tcp"}));
  ASSERT_TRUE(owner && client);
  auto b = kv_blocks();
  DeviceBuffer segment(b.total), source(b.total);
  std::memset(segment.bytes(), 0, b.total);
  fill(source.bytes(), b.total, 11);
  ASSERT_TRUE(owner->publish("kv-vram", segment.data(), b.total, MemoryKind::Cuda));
  ASSERT_TRUE(client->register_local(source.data(), b.total));
  auto handle = client->open_segment("kv-vram");
  ASSERT_TRUE(handle) << handle.error().describe();
  auto info = client->segment_info(*handle);
  ASSERT_TRUE(info);
  // Same host: shm is preferred wherever it registered the memory.
  EXPECT_EQ(info->transport, shm_takes ? "shm" : "tcp");
  run(*client, Op::Write, source.data(), *handle, b);
  expect_blocks(source.bytes(), segment.bytes(), b);

  // A host segment of the same owner is reached over shm: device memory registered only on tcp cannot be
  // its local side, and the batch is refused before anything is posted, naming shm's refusal.
  auto host = owner->allocate_segment("host", 1 << 20);
  ASSERT_TRUE(host);
  auto host_handle = client->open_segment("host");
  ASSERT_TRUE(host_handle);
  EXPECT_EQ(client->segment_info(*host_handle)->transport, "shm");
  Request request{Op::Write, source.data(), *host_handle, 0, 4096};
  auto refused = client->submit(std::span(&request, 1));
  if (shm_takes) {
    ASSERT_TRUE(refused) << refused.error().describe();
    EXPECT_TRUE((*refused)->wait(5s));
  } else {
    ASSERT_FALSE(refused) << "device memory that shm refused was posted over shm";
    EXPECT_EQ(refused.error().code(), Errc::NotSupported);
    EXPECT_NE(refused.error().message().find("over shm, which did not register the local memory (shm: "),
              std::string::npos)
        << refused.error().message();
  }
}

// Weights broadcast (include/rdmakit/xfer/broadcast.hpp) from device memory into device memory: the owner's
// region and both receivers' are cudaMalloc'ed, each hop WRITEs along its transport's device path (tcp:
// staged; shm: CUDA IPC), and every receiver ends with the owner's bytes.
TEST_F(XferDevice, BroadcastFromDeviceMemoryReachesEveryReceiversDeviceMemory) {
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    constexpr std::size_t kSize = (3 << 20) + 4096;  // chunks of 1 MiB and a short last one
    const BroadcastOptions broadcast{.session = std::string("device-") + transport,
                                     .receivers = 2,
                                     .size = kSize,
                                     .chunk_bytes = 1 << 20,
                                     .window = 2,
                                     .timeout = 20s};
    std::vector<std::shared_ptr<Context>> contexts;
    std::vector<std::shared_ptr<MemoryRegion>> regions;
    for (int rank = 0; rank <= 2; ++rank) {
      auto context = Context::open(Options{.transport = transport, .name = "bcast-" + std::to_string(rank)});
      ASSERT_TRUE(context) << context.error().describe();
      auto region = (*context)->allocate(kSize, Access::LocalWrite | Access::RemoteWrite, MemoryKind::Cuda);
      ASSERT_TRUE(region) << region.error().describe();
      ASSERT_EQ((*region)->kind(), MemoryKind::Cuda);
      auto* view = static_cast<std::byte*>(fake().view((*region)->data()));
      if (rank == 0)
        fill(view, kSize, 7);
      else
        std::memset(view, 0, kSize);
      contexts.push_back(*context);
      regions.push_back(*region);
    }
    std::vector<Result<BroadcastResult>> results(3, fail(Errc::Unavailable, "not run"));
    std::vector<std::thread> ranks;
    for (std::uint32_t rank = 0; rank <= 2; ++rank)
      ranks.emplace_back([&, rank] {
        results[rank] = rank == 0
                            ? broadcast_send(*contexts[0], *metadata_, *regions[0], broadcast)
                            : broadcast_receive(*contexts[rank], *metadata_, *regions[rank], rank, broadcast);
      });
    for (auto& t : ranks) t.join();
    for (std::uint32_t rank = 0; rank <= 2; ++rank)
      ASSERT_TRUE(results[rank]) << "rank " << rank << ": " << results[rank].error().describe();
    const auto* sent = static_cast<const std::byte*>(fake().view(regions[0]->data()));
    for (int rank = 1; rank <= 2; ++rank) {
      const auto* got = static_cast<const std::byte*>(fake().view(regions[rank]->data()));
      EXPECT_EQ(std::memcmp(sent, got, kSize), 0)
          << "receiver " << rank << " does not hold the owner's bytes";
    }
  }
}

// Every built transport has a path for device memory; gpu_path=direct (RDMAKIT_GPU_PATH) makes tcp refuse
// its staged one, so a tcp-only engine has no rail that takes the memory.
TEST_F(XferDevice, NoRailTakesTheMemoryFailsNamingEachRefusal) {
  struct DirectOnly {
    DirectOnly() { ::setenv("RDMAKIT_GPU_PATH", "direct", 1); }
    ~DirectOnly() { ::unsetenv("RDMAKIT_GPU_PATH"); }
  } direct_only;
  auto engine = make_engine(*metadata_, options("tcp-only", {"tcp"}));
  ASSERT_TRUE(engine);
  DeviceBuffer memory(1 << 20);
  auto allocated = engine->allocate_segment("a", 1 << 20, MemoryKind::Cuda);
  auto published = engine->publish("p", memory.data(), 1 << 20, MemoryKind::Cuda);
  auto detected = engine->register_local(memory.data(), 1 << 20);  // Auto detects device memory
  for (const Error* error :
       {allocated ? nullptr : &allocated.error(), published ? nullptr : &published.error(),
        detected ? nullptr : &detected.error()}) {
    ASSERT_NE(error, nullptr) << "device memory was taken by a rail that refuses it";
    EXPECT_EQ(error->code(), Errc::NotSupported);
    EXPECT_NE(error->message().find("no rail of this engine takes"), std::string::npos) << error->message();
    EXPECT_NE(error->message().find("tcp: "), std::string::npos) << error->message();
    EXPECT_NE(error->message().find("gpu_path=direct"), std::string::npos) << error->message();
  }
  // Nothing was published under either name.
  auto other = make_engine(*metadata_, options("other", {"tcp"}));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->open_segment("a").error().code(), Errc::NotFound);
  EXPECT_EQ(other->open_segment("p").error().code(), Errc::NotFound);
}

// File segments into and out of device memory: the owner pushes each READ's bytes into the requester's
// device memory and pulls each WRITE's bytes from it, along the rail's device path (tcp: staged at the
// requester; shm: CUDA IPC), unaligned ranges included; every byte of the device memory and of the file
// checked. Over tcp the requester receives the pushed bytes through its context's pinned slots and copies
// them to the device asynchronously (no synchronous cudaMemcpy, no copy from unpinned memory).
TEST_F(XferDevice, FileSegmentReadsIntoAndWritesFromDeviceMemory) {
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    if (std::string(transport) == "shm" && !takes_device_memory(transport)) continue;  // tcp always does
    std::printf("file segment <-> device memory over %s\n", transport);
    auto owner = make_engine(*metadata_, options(std::string("owner-") + transport, {transport}));
    auto client = make_engine(*metadata_, options(std::string("client-") + transport, {transport}));
    ASSERT_TRUE(owner && client);
    constexpr std::size_t kSize = 1 << 20;
    std::vector<std::byte> contents(kSize);
    fill(contents.data(), kSize, 3);
    auto path = dir_.path() / (std::string("file-") + transport + ".bin");
    write_file(path, contents);
    std::string name = std::string("file-") + transport;
    ASSERT_TRUE(owner->publish_file(name, path.string(), {.writable = true}));
    DeviceBuffer sink(kSize), source(kSize);
    std::memset(sink.bytes(), 0xee, kSize);
    fill(source.bytes(), kSize, 9);
    ASSERT_TRUE(client->register_local(sink.data(), kSize, MemoryKind::Cuda));
    ASSERT_TRUE(client->register_local(source.data(), kSize, MemoryKind::Cuda));
    auto handle = client->open_segment(name);
    ASSERT_TRUE(handle) << handle.error().describe();
    // READs: the whole file in 64 KiB pieces, then one unaligned range over a piece boundary again.
    std::vector<Request> reads;
    for (std::size_t at = 0; at < kSize; at += 64 << 10)
      reads.push_back({Op::Read, sink.data() + at, *handle, at, 64 << 10});
    const FakeCudartStats before = fake().now();
    auto batch = client->submit(reads);
    ASSERT_TRUE(batch) << batch.error().describe();
    ASSERT_TRUE((*batch)->wait(10s));
    ASSERT_EQ((*batch)->failed(), 0u);
    EXPECT_EQ(std::memcmp(sink.bytes(), contents.data(), kSize), 0) << "the file's bytes did not land";
    if (std::string(transport) == "tcp") {
      const FakeCudartStats after = fake().now();
      EXPECT_GE(after.copies - before.copies, static_cast<long>(reads.size()));
      EXPECT_EQ(after.sync_copies, before.sync_copies) << "a synchronous copy on the receive path";
      EXPECT_EQ(after.copies_unpinned, before.copies_unpinned) << "a copy from unpinned memory";
    }
    // On the owner's host, yet device memory is not read locally: the owner pushes into it over the
    // transport's device path (tcp: staged through host memory; shm: CUDA IPC), and the batch says so.
    auto paths = (*batch)->paths();
    EXPECT_EQ(paths.file_requests_by_owner, reads.size()) << to_string(paths);
    EXPECT_EQ(paths.file_requests_local, 0u) << to_string(paths);
    EXPECT_EQ(paths.transports, std::vector<std::string>{transport}) << to_string(paths);
    EXPECT_EQ(paths.memory, std::vector<MemoryPath>{std::string(transport) == "tcp" ? MemoryPath::Staged
                                                                                    : MemoryPath::CudaIpc})
        << to_string(paths);
    std::memset(sink.bytes(), 0xee, kSize);
    Request odd{Op::Read, sink.data() + 100, *handle, (64 << 10) - 1000, 5000};
    auto unaligned = client->submit(std::span(&odd, 1));
    ASSERT_TRUE(unaligned && (*unaligned)->wait(10s) && (*unaligned)->failed() == 0);
    EXPECT_EQ(std::memcmp(sink.bytes() + 100, contents.data() + (64 << 10) - 1000, 5000), 0);
    EXPECT_EQ(sink.bytes()[99], std::byte{0xee});
    EXPECT_EQ(sink.bytes()[5100], std::byte{0xee});
    // A WRITE of an unaligned range from device memory: exactly those bytes change in the file.
    Request write{Op::Write, source.data() + 7, *handle, 4096 + 13, 20000};
    auto written = client->submit(std::span(&write, 1));
    ASSERT_TRUE(written && (*written)->wait(10s) && (*written)->failed() == 0);
    std::memcpy(contents.data() + 4096 + 13, source.bytes() + 7, 20000);
    auto now = read_file(path);
    ASSERT_EQ(now.size(), kSize);
    EXPECT_EQ(std::memcmp(now.data(), contents.data(), kSize), 0) << "the file is not the expected bytes";
  }
}

}  // namespace
}  // namespace rdmakit::xfer::testing
