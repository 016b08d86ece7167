// The shm transport within one process: two contexts connected over a Unix socket, every operation on
// both kinds of memory (allocate()'d, reached through the shared mapping, and register_memory()'d,
// reached by cross-memory attach), the error rules, revocation, and the pure parts (registry, arena).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "support/test_support.hpp"
#include "transport/shm/layout.hpp"
#include "transport/shm/registry.hpp"
#include "transport/shm/segment.hpp"

using namespace std::chrono_literals;
using namespace rdmakit;

namespace {

struct Pair {
  std::shared_ptr<Context> a, b;
  std::shared_ptr<Connection> ab;  // a's end
  std::shared_ptr<Connection> ba;  // b's end
};

Pair connect_pair(Options options = {}) {
  options.transport = "shm";
  Pair p;
  p.a = Context::open(options).value();
  p.b = Context::open(options).value();
  auto listener = p.b->listen().value();
  auto accepted = std::async(std::launch::async, [&] { return listener->accept(5s); });
  p.ab = p.a->connect(listener->address()).value();
  p.ba = accepted.get().value();
  return p;
}

Completion wait_ok(Connection& c, std::uint64_t id) {
  auto done = c.wait(id, 5s);
  EXPECT_TRUE(done.has_value()) << (done ? "" : done.error().describe());
  if (!done) return {};
  EXPECT_EQ(done->status, Status::Success) << to_string(done->status);
  return *done;
}

// Memory on both paths: allocate() (mapped by the peer) or plain heap (cross-memory attach).
struct Memory {
  std::vector<std::byte> heap;
  std::shared_ptr<MemoryRegion> region;
  std::byte* data() const { return static_cast<std::byte*>(region->data()); }
};

Memory make_memory(Context& ctx, std::size_t size, bool mapped, Access access = Access::All) {
  Memory m;
  if (mapped) {
    m.region = ctx.allocate(size, access).value();
  } else {
    m.heap.resize(size);
    m.region = ctx.register_memory(m.heap.data(), size, access).value();
  }
  return m;
}

class ShmBoth : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Memory, ShmBoth, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "mapped" : "cross_memory"; });

TEST_P(ShmBoth, WriteThenReadBackAtOddOffsets) {
  Pair p = connect_pair();
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{3} << 20}) {
    Memory local = make_memory(*p.a, size + 16, true);
    Memory remote = make_memory(*p.b, size + 16, GetParam());
    rdmakit::testing::fill_pattern(local.data() + 3, size, 7);
    wait_ok(*p.ab, p.ab->write(local.region->slice(3, size), remote.region->descriptor().at(5)).value());
    EXPECT_EQ(rdmakit::testing::find_pattern_mismatch(remote.data() + 5, size, 7), size);
    Memory back = make_memory(*p.a, size + 16, false);
    auto done =
        wait_ok(*p.ab, p.ab->read(back.region->slice(1, size), remote.region->descriptor().at(5)).value());
    EXPECT_EQ(done.bytes, size);
    EXPECT_EQ(rdmakit::testing::find_pattern_mismatch(back.data() + 1, size, 7), size);
  }
}

TEST_P(ShmBoth, ScatterGatherWrite) {
  Pair p = connect_pair();
  Memory local = make_memory(*p.a, 300, GetParam());
  Memory remote = make_memory(*p.b, 300, GetParam());
  rdmakit::testing::fill_pattern(local.data(), 300, 3);
  Segment sgl[3] = {local.region->slice(200, 100), local.region->slice(0, 100),
                    local.region->slice(100, 100)};
  wait_ok(*p.ab, p.ab->write(std::span(sgl), remote.region->descriptor().at(0)).value());
  EXPECT_EQ(std::memcmp(remote.data(), local.data() + 200, 100), 0);
  EXPECT_EQ(std::memcmp(remote.data() + 100, local.data(), 200), 0);
}

TEST_P(ShmBoth, AtomicsUnderContentionWithLocalAtomics) {
  Pair p = connect_pair();
  Memory remote = make_memory(*p.b, 64, GetParam());
  auto* word = reinterpret_cast<std::uint64_t*>(remote.data() + 8);
  constexpr int kOps = 2000;
  std::thread local_adder([&] {
    for (int i = 0; i < kOps; ++i) std::atomic_ref<std::uint64_t>(*word).fetch_add(1);
  });
  Memory result = make_memory(*p.a, 8, true);
  std::uint64_t seen_max = 0;
  for (int i = 0; i < kOps; ++i) {
    wait_ok(*p.ab, p.ab->fetch_add(result.region->slice(0, 8), remote.region->descriptor().at(8), 1).value());
    std::uint64_t old;
    std::memcpy(&old, result.data(), 8);
    EXPECT_GE(old, seen_max);
    seen_max = old;
  }
  local_adder.join();
  EXPECT_EQ(std::atomic_ref<std::uint64_t>(*word).load(), std::uint64_t{2 * kOps});
  auto id =
      p.ab->compare_swap(result.region->slice(0, 8), remote.region->descriptor().at(8), 2 * kOps, 42).value();
  wait_ok(*p.ab, id);
  EXPECT_EQ(*word, 42u);
  // Misaligned: RemoteInvalidRequest, and the connection is in error.
  auto bad = p.ab->fetch_add(result.region->slice(0, 8), remote.region->descriptor().at(4), 1).value();
  EXPECT_EQ(p.ab->wait(bad, 5s)->status, Status::RemoteInvalidRequest);
  EXPECT_EQ(p.ab->health().error().code(), Errc::TransportFailure);
  EXPECT_EQ(p.ab->health().error().status(), Status::RemoteInvalidRequest);
}

TEST_P(ShmBoth, SendRecvAndWriteImmInOrder) {
  Pair p = connect_pair();
  Memory src = make_memory(*p.a, 4096, GetParam());
  Memory dst = make_memory(*p.b, 4096, GetParam());
  Memory rbuf = make_memory(*p.b, 64, GetParam());
  rdmakit::testing::fill_pattern(src.data(), 4096, 11);
  auto r1 = p.ba->post_recv(rbuf.region->slice(0, 64)).value();
  auto r2 = p.ba->post_recv(rbuf.region->slice(0, 0)).value();
  // WRITE then SEND: the bytes are there when the receive completes.
  p.ab->write(src.region->slice(0, 4096), dst.region->descriptor().at(0), false).value();
  wait_ok(*p.ab, p.ab->send_imm(src.region->slice(0, 10), 77).value());
  auto got = wait_ok(*p.ba, r1);
  EXPECT_EQ(got.opcode, Opcode::Recv);
  EXPECT_TRUE(got.has_imm);
  EXPECT_EQ(got.imm, 77u);
  EXPECT_EQ(got.bytes, 10u);
  EXPECT_EQ(got.connection, p.ba->number());
  EXPECT_EQ(std::memcmp(rbuf.data(), src.data(), 10), 0);
  EXPECT_EQ(rdmakit::testing::find_pattern_mismatch(dst.data(), 4096, 11), 4096u);
  wait_ok(*p.ab, p.ab->write_imm(src.region->slice(0, 100), dst.region->descriptor().at(1000), 99).value());
  auto imm = wait_ok(*p.ba, r2);
  EXPECT_EQ(imm.opcode, Opcode::RecvWriteImm);
  EXPECT_EQ(imm.imm, 99u);
  EXPECT_EQ(imm.bytes, 100u);
  EXPECT_EQ(std::memcmp(dst.data() + 1000, src.data(), 100), 0);
}

TEST(Shm, SendWaitsForAReceiveThenRnr) {
  Pair p = connect_pair(Options{.rnr_timeout = 300ms});
  Memory src = make_memory(*p.a, 64, true);
  Memory dst = make_memory(*p.b, 64, true);
  auto send = p.ab->send(src.region->slice(0, 8)).value();
  std::this_thread::sleep_for(50ms);
  auto recv = p.ba->post_recv(dst.region->slice(0, 64)).value();
  wait_ok(*p.ab, send);
  wait_ok(*p.ba, recv);
  auto late = p.ab->send(src.region->slice(0, 8)).value();
  auto behind = p.ab->write(src.region->slice(0, 8), dst.region->descriptor().at(0)).value();
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(p.ab->wait(late, 5s)->status, Status::RnrRetryExceeded);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_EQ(p.ab->wait(behind, 5s)->status, Status::Flushed);
  EXPECT_EQ(p.ab->post(std::span<const WorkRequest>()).error().code(), Errc::InvalidArgument);
  auto flushed = p.ab->send(src.region->slice(0, 8));  // behind the failure: accepted, flushed
  ASSERT_TRUE(flushed.has_value()) << flushed.error().describe();
  EXPECT_EQ(p.ab->wait(*flushed, 5s)->status, Status::Flushed);
  EXPECT_EQ(p.ab->health().error().status(), Status::RnrRetryExceeded);
}

TEST(Shm, SendLongerThanReceive) {
  Pair p = connect_pair();
  Memory src = make_memory(*p.a, 64, true);
  Memory dst = make_memory(*p.b, 64, false);
  auto recv = p.ba->post_recv(dst.region->slice(0, 4)).value();
  auto send = p.ab->send(src.region->slice(0, 8)).value();
  EXPECT_EQ(p.ab->wait(send, 5s)->status, Status::RemoteInvalidRequest);
  EXPECT_EQ(p.ba->wait(recv, 5s)->status, Status::LocalLength);
}

TEST(Shm, RemoteAccessErrorsFlushWhatFollows) {
  Pair p = connect_pair();
  Memory local = make_memory(*p.a, 64, true);
  Memory read_only = make_memory(*p.b, 64, true, Access::LocalWrite | Access::RemoteRead);
  RemoteRegion d = read_only.region->descriptor();
  // One chain: ops run as they are posted, so only what is already posted can be flushed.
  Segment seg = local.region->slice(0, 8);
  WorkRequest chain[2] = {{.opcode = Opcode::Write, .local = std::span(&seg, 1), .remote = d.at(0)},
                          {.opcode = Opcode::Read, .local = std::span(&seg, 1), .remote = d.at(0)}};
  auto bad_right = p.ab->post(chain).value();
  auto behind = bad_right + 1;
  EXPECT_EQ(p.ab->wait(bad_right, 5s)->status, Status::RemoteAccess);
  EXPECT_EQ(p.ab->wait(behind, 5s)->status, Status::Flushed);
  EXPECT_TRUE(p.ab->stats().failed);
  EXPECT_EQ(p.ab->stats().outstanding, 0u);

  Pair q = connect_pair();
  Memory l2 = make_memory(*q.a, 64, false);
  Memory r2 = make_memory(*q.b, 64, false);
  auto oob = q.ab->read(l2.region->slice(0, 64), r2.region->descriptor().at(1)).value();
  EXPECT_EQ(q.ab->wait(oob, 5s)->status, Status::RemoteAccess);

  Pair s = connect_pair();
  Memory l3 = make_memory(*s.a, 64, true);
  auto bad_local = s.ab->write(Segment{reinterpret_cast<std::uint64_t>(l3.data()), 65, l3.region->lkey()},
                               make_memory(*s.b, 64, true).region->descriptor().at(0));
  ASSERT_TRUE(bad_local);
  EXPECT_EQ(s.ab->wait(*bad_local, 5s)->status, Status::LocalProtection);
}

TEST(Shm, StaleDescriptorIsRefused) {
  Pair p = connect_pair();
  Memory local = make_memory(*p.a, 64, true);
  Memory remote = make_memory(*p.b, 64, true);
  RemoteAddress stale = remote.region->descriptor().at(0);
  stale.owner_epoch ^= 1;
  EXPECT_EQ(p.ab->write(local.region->slice(0, 8), stale).error().code(), Errc::StaleDescriptor);
  EXPECT_TRUE(p.ab->health());
}

// map_remote: stores through the pointer land in the owner's memory and the owner's stores show through
// it; every request the owner did not grant is refused with the error that names it.
TEST(Shm, MapRemoteGivesLoadStoreAccessToAllocatedMemoryOnly) {
  Pair p = connect_pair();
  Memory writable = make_memory(*p.b, 8192, true);
  RemoteAddress at = writable.region->descriptor().at(100);
  auto mapped = p.ab->map_remote(at, 4000, Access::RemoteRead | Access::RemoteWrite);
  ASSERT_TRUE(mapped.has_value()) << mapped.error().describe();
  rdmakit::testing::fill_pattern(*mapped, 4000, 11);
  EXPECT_EQ(rdmakit::testing::find_pattern_mismatch(writable.data() + 100, 4000, 11), 4000u);
  std::memset(writable.data() + 100, 0x5a, 16);
  EXPECT_EQ((*mapped)[15], std::byte{0x5a});

  auto error_of = [&](RemoteAddress remote, std::size_t length, Access access) {
    auto got = p.ab->map_remote(remote, length, access);
    return got ? Errc{} : got.error().code();
  };
  EXPECT_EQ(error_of(at, 8192, Access::RemoteRead), Errc::InvalidArgument);  // past the region's end
  RemoteAddress wrong_key = at;
  wrong_key.rkey ^= 1u << 20;
  EXPECT_EQ(error_of(wrong_key, 8, Access::RemoteRead), Errc::InvalidArgument);
  EXPECT_EQ(error_of(at, 8, Access::RemoteAtomic), Errc::InvalidArgument);
  RemoteAddress stale = at;
  stale.owner_epoch ^= 1;
  EXPECT_EQ(error_of(stale, 8, Access::RemoteRead), Errc::StaleDescriptor);
  // Read-only rights give a read-only mapping and no writable one.
  Memory readable = make_memory(*p.b, 4096, true, Access::RemoteRead);
  RemoteAddress ro = readable.region->descriptor().at(0);
  EXPECT_EQ(error_of(ro, 8, Access::RemoteWrite), Errc::InvalidArgument);
  std::memset(readable.data(), 0x33, 8);
  auto read_only = p.ab->map_remote(ro, 8, Access::RemoteRead);
  ASSERT_TRUE(read_only.has_value()) << read_only.error().describe();
  EXPECT_EQ((*read_only)[7], std::byte{0x33});
  // Registered heap memory is not mapped: cross-memory attach only.
  Memory heap = make_memory(*p.b, 64, false);
  EXPECT_EQ(error_of(heap.region->descriptor().at(0), 8, Access::RemoteRead), Errc::NotSupported);
  p.ab->close();
  EXPECT_EQ(error_of(at, 8, Access::RemoteRead), Errc::ConnectionBroken);
}

// Issue item 2: a region its owner deregistered is unreachable, on both paths, even if its memory is
// still there (heap) or was handed out again (arena).
TEST_P(ShmBoth, DeregisteredRegionCannotBeReached) {
  Pair p = connect_pair();
  Memory local = make_memory(*p.a, 64, true);
  std::vector<std::byte> keep(64);
  std::shared_ptr<MemoryRegion> victim = GetParam()
                                             ? p.b->allocate(64, Access::All).value()
                                             : p.b->register_memory(keep.data(), 64, Access::All).value();
  RemoteRegion d = victim->descriptor();
  wait_ok(*p.ab, p.ab->write(local.region->slice(0, 8), d.at(0)).value());
  victim.reset();
  auto after = p.ab->write(local.region->slice(0, 8), d.at(0)).value();
  EXPECT_EQ(p.ab->wait(after, 5s)->status, Status::RemoteAccess);
}

TEST(Shm, CloseFlushesAndThePeerNotices) {
  Pair p = connect_pair(Options{.timeout = 20s, .rnr_timeout = 10s});
  Memory local = make_memory(*p.a, 64, true);
  auto recv = p.ba->post_recv(make_memory(*p.b, 64, true).region->slice(0, 64)).value();
  auto own_recv = p.ab->post_recv(local.region->slice(0, 64)).value();
  p.ab->close();
  EXPECT_EQ(p.ab->wait(own_recv, 5s)->status, Status::Flushed);
  EXPECT_EQ(p.ba->wait(recv, 5s)->status, Status::Flushed);
  EXPECT_EQ(p.ab->health().error().code(), Errc::ConnectionBroken);
  EXPECT_EQ(p.ba->health().error().code(), Errc::ConnectionBroken);
}

TEST(Shm, BlockingWaiterIsWokenByTheDoorbell) {
  Pair p = connect_pair(Options{.wait_mode = WaitMode::Block});
  Memory src = make_memory(*p.a, 64, true);
  Memory dst = make_memory(*p.b, 64, true);
  // The progress thread's idle sleep is 100 ms: a wake-up well before that came from the doorbell. The
  // best of three trials keeps a loaded machine from making this flaky.
  auto best = std::chrono::steady_clock::duration::max();
  for (int trial = 0; trial < 3; ++trial) {
    auto recv = p.ba->post_recv(dst.region->slice(0, 64)).value();
    auto waiter = std::async(std::launch::async, [&] { return p.ba->wait(recv, 5s); });
    std::this_thread::sleep_for(150ms);  // long enough for the progress thread to sleep
    wait_ok(*p.ab, p.ab->send(src.region->slice(0, 8)).value());
    auto start = std::chrono::steady_clock::now();
    auto got = waiter.get();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, Status::Success);
    best = std::min(best, std::chrono::steady_clock::now() - start);
  }
  EXPECT_LT(best, 50ms);
}

// A poll takes the polling lease: peers stop ringing the doorbell. A poller that then stops without going
// to sleep leaves what arrives to the progress thread, which must sleep no longer than the lease (1 ms),
// not its idle 100 ms. Best of three trials, as above.
TEST(Shm, ReceiveAfterAPollerStopsIsDeliveredWithinTheLease) {
  Pair p = connect_pair(Options{.wait_mode = WaitMode::Spin});
  Memory src = make_memory(*p.a, 64, true);
  Memory dst = make_memory(*p.b, 64, true);
  auto best = std::chrono::steady_clock::duration::max();
  for (int trial = 0; trial < 3; ++trial) {
    std::uint64_t before = p.ba->stats().completed;
    auto recv = p.ba->post_recv(dst.region->slice(0, 64)).value();
    std::this_thread::sleep_for(150ms);  // the progress thread is in its idle sleep
    std::array<Completion, 4> batch;
    ASSERT_EQ(p.ba->recv_cq().poll(batch), 0u);  // b polls once: the lease starts
    wait_ok(*p.ab, p.ab->send(src.region->slice(0, 8)).value());
    auto start = std::chrono::steady_clock::now();
    // Nobody polls b now, and stats() makes no progress: only b's progress thread can reap the receive.
    while (p.ba->stats().completed == before && std::chrono::steady_clock::now() - start < 2s)
      std::this_thread::sleep_for(200us);
    best = std::min(best, std::chrono::steady_clock::now() - start);
    ASSERT_EQ(wait_ok(*p.ba, recv).bytes, 8u);
  }
  EXPECT_LT(best, 10ms);
}

TEST(Shm, AddressesAndCapabilities) {
  auto ctx = Context::open(Options{.transport = "shm"}).value();
  EXPECT_TRUE(ctx->capabilities().one_sided_without_target_cpu);
  EXPECT_TRUE(ctx->capabilities().atomics_coherent_with_cpu);
  auto named = ctx->listen("shm:rdmakit-test-" + std::to_string(::getpid())).value();
  EXPECT_EQ(named->address(), "shm:rdmakit-test-" + std::to_string(::getpid()));
  EXPECT_EQ(ctx->listen("10.0.0.1:7000").error().code(), Errc::InvalidArgument);
  EXPECT_EQ(ctx->connect("shm:nobody-listens-here").error().code(), Errc::ConnectionRefused);
  EXPECT_EQ(ctx->connect("127.0.0.1:1").error().code(), Errc::InvalidArgument);
  EXPECT_EQ(ctx->listen()->get()->accept(10ms).error().code(), Errc::Timeout);
  auto region = ctx->allocate(5000, Access::All).value();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(region->data()) % 4096, 0u);
  EXPECT_EQ(ctx->register_memory(region->data(), 8, Access::RemoteWrite).error().code(),
            Errc::InvalidArgument);
}

TEST(ShmArena, ReusedMemoryIsZeroed) {
  auto arena = shm::Arena::create(std::size_t{1} << 24).value();
  auto* a = static_cast<std::byte*>(arena.allocate(10000).value());
  std::memset(a, 0xab, 10000);
  arena.free(a, 10000);
  auto* b = static_cast<std::byte*>(arena.allocate(8192).value());
  EXPECT_EQ(b, a);
  for (int i = 0; i < 8192; ++i) ASSERT_EQ(b[i], std::byte{0});
  EXPECT_EQ(arena.allocate(std::size_t{1} << 25).error().code(), Errc::InvalidArgument);
  EXPECT_EQ(arena.allocate((std::size_t{1} << 24) - 4096).error().code(), Errc::ResourceExhausted);
}

TEST(ShmRegistry, KeysBoundsRightsAndRevocation) {
  auto control = std::make_unique<shm::ControlSegment>();
  shm::Registry registry(control.get());
  auto keys = registry.add(1000, 100, Access::LocalWrite | Access::RemoteRead).value();
  std::uint32_t key = keys.rkey;
  EXPECT_EQ(shm::check_remote(*control, key, 1000, 100, Access::RemoteRead), Status::Success);
  EXPECT_EQ(shm::check_remote(*control, key, 1001, 100, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(shm::check_remote(*control, key, 1000, 10, Access::RemoteWrite), Status::RemoteAccess);
  EXPECT_EQ(shm::check_remote(*control, key ^ (1u << 20), 1000, 10, Access::RemoteRead),
            Status::RemoteAccess);
  EXPECT_EQ(shm::check_remote(*control, key, ~std::uint64_t{0}, 2, Access::RemoteRead), Status::RemoteAccess);
  EXPECT_EQ(registry.check_local(Segment{1050, 50, keys.lkey}, true), Status::Success);
  EXPECT_EQ(registry.check_local(Segment{1050, 51, keys.lkey}, false), Status::LocalProtection);
  registry.revoke(key);
  registry.release(key);
  EXPECT_EQ(shm::check_remote(*control, key, 1000, 100, Access::RemoteRead), Status::RemoteAccess);
  auto again = registry.add(1000, 100, Access::All).value();
  EXPECT_NE(again.rkey, key);
  EXPECT_NE(again.lkey, keys.lkey);
}

}  // namespace
