// Batches between two engines: bytes exact, per-request statuses, striping, coalescing, bounds, the
// in-flight bound and re-resolving a segment whose owner restarted. Over shm and tcp, with the metadata in
// the test double (file_metadata.hpp) and in the real builtin backend (a server in this process); over
// verbs too where RDMAKIT_TEST_XFER_VERBS_DEVICES names devices (the Soft-RoCE VM: one, or two striped).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "rdmakit/transports.hpp"
#include "support/test_support.hpp"
#include "xfer/engine/record.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;
using rdmakit::testing::fill_pattern;
using rdmakit::testing::find_pattern_mismatch;

constexpr std::size_t kSegment = 8 << 20;

struct Setup {
  const char* transport;
  const char* metadata;  // "file" (the test double) or "builtin"
};

class XferEngine : public ::testing::TestWithParam<Setup> {
 protected:
  void SetUp() override {
    if (std::string(GetParam().metadata) == "builtin") {
      auto server = serve_builtin_metadata("127.0.0.1:0");
      ASSERT_TRUE(server.has_value()) << server.error().describe();
      server_ = std::move(*server);
    }
    metadata_ = open_store();
    ASSERT_TRUE(metadata_);
    owner_ = make_engine(*metadata_, options("owner", owner_verbs_devices()));
    client_ = make_engine(*metadata_, options("client", verbs_devices()));
    ASSERT_TRUE(owner_ && client_);
    auto segment = owner_->allocate_segment("kv", kSegment);
    ASSERT_TRUE(segment.has_value()) << segment.error().describe();
    remote_ = segment->data();
    local_ = make_buffer(kSegment);
    back_ = make_buffer(kSegment);
    ASSERT_TRUE(client_->register_local(local_.get(), kSegment).has_value());
    ASSERT_TRUE(client_->register_local(back_.get(), kSegment).has_value());
    fill_pattern(local_.get(), kSegment, 17);
    std::memset(back_.get(), 0, kSegment);
    auto handle = client_->open_segment("kv");
    ASSERT_TRUE(handle.has_value()) << handle.error().describe();
    kv_ = *handle;
  }
  // Another client of the same store (the builtin server's, or the double's directory).
  std::unique_ptr<MetadataStore> open_store(MetadataOptions store_options = {}) {
    if (!server_) return std::make_unique<FileMetadataStore>(dir_.path());
    auto store = open_metadata(server_->url(), store_options);
    if (!store) ADD_FAILURE() << store.error().describe();
    return store ? std::move(*store) : nullptr;
  }
  std::string transport() const { return GetParam().transport; }
  // Whether the transport opens one of several devices (its registration says so: verbs).
  bool picks_device() const {
    for (const auto& info : built_transports())
      if (info.name == transport()) return info.picks_device;
    return false;
  }
  // A client's device rails pair with the owner's in order (owner_verbs_devices: the reverse of the
  // client's). On the devices the Soft-RoCE VM names the peer timeout is generous: Soft-RoCE under
  // emulation on a loaded host drops packets (its retries recover them, but slowly), and a request must not
  // fail for that.
  EngineOptions options(std::string name, std::vector<std::string> devices) {
    const bool emulated_devices = picks_device() && !devices.empty();
    return EngineOptions{
        .name = name + "-" + transport(),
        .transports = {transport()},
        .verbs_devices = devices,  // ignored by a transport that picks no device
        .connections_per_rail = 3,
        .peer_timeout = emulated_devices ? std::chrono::milliseconds(15000) : EngineOptions{}.peer_timeout};
  }
  Request write(std::uint64_t offset, std::uint64_t length) {
    return Request{Op::Write, local_.get() + offset, kv_, offset, length};
  }
  Request read(std::uint64_t offset, std::uint64_t length) {
    return Request{Op::Read, back_.get() + offset, kv_, offset, length};
  }

  TempDir dir_;
  std::unique_ptr<MetadataServer> server_;  // before the stores and engines: it outlives them
  std::unique_ptr<MetadataStore> metadata_;
  std::unique_ptr<Engine> owner_, client_;
  std::byte* remote_ = nullptr;
  Buffer local_, back_;
  SegmentHandle kv_;
};

TEST_P(XferEngine, BatchMovesExactBytesWithAStatusPerRequest) {
  // A striped 3 MiB request, a run of adjacent 4 KiB pieces (coalesced), and scattered odd sizes.
  std::vector<Request> writes{write(0, 3 << 20)};
  for (std::uint64_t k = 0; k < 32; ++k) writes.push_back(write((4 << 20) + k * 4096, 4096));
  for (std::uint64_t k = 0; k < 16; ++k) writes.push_back(write((6 << 20) + k * 8191, 1 + k * 97));
  auto batch = client_->submit(writes);
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  ASSERT_TRUE((*batch)->wait(10s).has_value());
  EXPECT_EQ((*batch)->failed(), 0u);
  for (std::size_t i = 0; i < writes.size(); ++i) {
    auto status = (*batch)->status(i);
    ASSERT_TRUE(status.has_value()) << i;
    EXPECT_TRUE(status->has_value()) << i << ": " << status->error().describe();
    const auto& w = writes[i];
    EXPECT_EQ(std::memcmp(remote_ + w.offset, local_.get() + w.offset, w.length), 0) << "request " << i;
  }
  auto stats = client_->stats();
  EXPECT_GE(stats.coalesced, 32u);
  EXPECT_LT(stats.work_requests, writes.size() + 3);  // 3 MiB striped into 3, the 32 pieces into 2

  // READ it all back with a callback; the bytes the owner holds arrive exactly.
  std::vector<Request> reads;
  for (const auto& w : writes) reads.push_back(read(w.offset, w.length));
  std::atomic<int> called{0};
  auto back = client_->submit(reads, [&](Batch& b) { called += b.done() ? 1 : 100; });
  ASSERT_TRUE(back.has_value());
  ASSERT_TRUE((*back)->wait(10s).has_value());
  for (int spin = 0; spin < 1000 && called == 0; ++spin) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(called.load(), 1);
  for (const auto& w : writes) {
    EXPECT_EQ(std::memcmp(back_.get() + w.offset, local_.get() + w.offset, w.length), 0) << w.offset;
  }
}

TEST_P(XferEngine, PollingSeesEveryRequestFinish) {
  std::vector<Request> writes;
  for (std::uint64_t k = 0; k < 64; ++k) writes.push_back(write(k * 65536, 65536 - k));
  auto batch = client_->submit(writes);
  ASSERT_TRUE(batch.has_value());
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!(*batch)->done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE((*batch)->done());
  for (std::size_t i = 0; i < writes.size(); ++i) {
    auto status = *(*batch)->status(i);
    EXPECT_TRUE(status.has_value()) << i << ": " << status.error().describe();
    EXPECT_EQ(std::memcmp(remote_ + writes[i].offset, local_.get() + writes[i].offset, writes[i].length), 0);
    if (i > 0) {
      EXPECT_EQ(remote_[writes[i].offset + writes[i].length], std::byte{0}) << "past request " << i;
    }
  }
}

TEST_P(XferEngine, OutOfBoundsRequestRefusesTheBatchNamingIt) {
  auto before = client_->stats().work_requests;
  // The local side of each bad request is valid: only the segment's bounds can refuse it.
  std::vector<Request> requests{write(0, 4096), write(4096, 4096),
                                Request{Op::Write, local_.get(), kv_, kSegment - 100, 101}, write(0, 1)};
  auto batch = client_->submit(requests);
  ASSERT_FALSE(batch.has_value());
  EXPECT_EQ(batch.error().code(), Errc::InvalidArgument);
  EXPECT_NE(batch.error().message().find("request 2: offset"), std::string::npos) << batch.error().message();
  EXPECT_NE(batch.error().message().find("outside segment 'kv'"), std::string::npos)
      << batch.error().message();
  requests[2] = Request{Op::Write, local_.get(), kv_, UINT64_MAX - 10, 20};  // the sum overflows
  EXPECT_NE(client_->submit(requests).error().message().find("outside segment"), std::string::npos);
  requests[2] = Request{Op::Write, remote_, kv_, 0, 16};  // local memory not registered with the client
  EXPECT_NE(client_->submit(requests).error().message().find("request 2"), std::string::npos);
  requests[2] = write(0, 0);
  EXPECT_EQ(client_->submit(requests).error().code(), Errc::InvalidArgument);
  requests[2] = Request{Op::Write, local_.get(), SegmentHandle{99}, 0, 16};
  EXPECT_EQ(client_->submit(requests).error().code(), Errc::InvalidArgument);
  EXPECT_EQ(client_->stats().work_requests, before);  // nothing of a refused batch was posted
  for (std::size_t i = 0; i < kSegment; i += 4096) ASSERT_EQ(remote_[i], std::byte{0}) << i;
}

TEST_P(XferEngine, InFlightBoundIsRespected) {
  auto metadata = open_store();
  ASSERT_TRUE(metadata);
  auto opts = options("bounded", verbs_devices());
  opts.max_inflight_per_peer = 4;
  opts.coalesce_bytes = 0;  // every request its own work request
  auto bounded = make_engine(*metadata, opts);
  ASSERT_TRUE(bounded);
  ASSERT_TRUE(bounded->register_local(local_.get(), kSegment).has_value());
  auto kv = bounded->open_segment("kv");
  ASSERT_TRUE(kv.has_value());
  std::vector<Request> writes;
  for (std::uint64_t k = 0; k < 300; ++k)
    writes.push_back(Request{Op::Write, local_.get() + k * 4096, *kv, k * 4096, 4096});
  auto batch = bounded->submit(writes);
  ASSERT_TRUE(batch.has_value());
  ASSERT_TRUE((*batch)->wait(20s).has_value());
  EXPECT_EQ((*batch)->failed(), 0u);
  auto stats = bounded->stats();
  EXPECT_EQ(stats.work_requests, 300u);
  EXPECT_LE(stats.peak_inflight_per_peer, 4u);
  EXPECT_GE(stats.peak_inflight_per_peer, 1u);
  EXPECT_EQ(std::memcmp(remote_, local_.get(), 300 * 4096), 0);
}

TEST_P(XferEngine, CachedNamesCostNoMetadataRoundTrip) {
  // A client on a store of its own that renews no lease during the test: the shared store's count also
  // holds the owner's renewals (one a second), which a slow run (sanitizers, emulation) would include.
  auto quiet_store = open_store({.ttl = std::chrono::hours(2), .renew_interval = std::chrono::hours(1)});
  ASSERT_TRUE(quiet_store);
  auto quiet = make_engine(*quiet_store, options("quiet", verbs_devices()));
  ASSERT_TRUE(quiet);
  ASSERT_TRUE(quiet->register_local(local_.get(), kSegment).has_value());
  auto kv = quiet->open_segment("kv");
  ASSERT_TRUE(kv.has_value()) << kv.error().describe();
  auto before = quiet_store->round_trips();
  auto again = quiet->open_segment("kv");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->value, kv->value);
  std::vector<Request> writes{{Op::Write, local_.get(), *kv, 0, 1 << 20},
                              {Op::Write, local_.get() + (1 << 20), *kv, 1 << 20, 4096}};
  for (int round = 0; round < 5; ++round) {
    auto batch = quiet->submit(writes);
    ASSERT_TRUE(batch.has_value() && (*batch)->wait(10s).has_value());
    EXPECT_EQ((*batch)->failed(), 0u);
  }
  EXPECT_EQ(quiet_store->round_trips(), before);
}

// The owner restarts: the cached resolution's connections break, the engine re-resolves and the retry lands
// in the new life's memory. While the metadata still names the dead life (its entry not yet expired), a
// connection to the new life at the old address is refused at post (StaleDescriptor), never posted.
TEST_P(XferEngine, RestartedOwnerIsReResolvedAndAStaleDescriptorNeverLands) {
  auto old_record = metadata_->lookup(detail::segment_key("kv"));
  ASSERT_TRUE(old_record.has_value() && old_record->has_value());
  auto secret = detail::engine_secret(EngineOptions{}.listen_address);
  ASSERT_TRUE(secret.has_value()) << secret.error().describe();
  auto address = detail::open_sealed(**old_record, "kv", *secret)->rails.front().address;
  owner_.reset();
  auto opts = options("owner", owner_verbs_devices());
  // The new life listens where the old one did when the old one listened where it was told (the loopback
  // host:port of EngineOptions::listen_address: tcp). A transport whose addresses are names (shm) or that
  // listens on each device's own address (verbs) gets a new address.
  const std::string told = EngineOptions{}.listen_address;
  const bool same_address = address.starts_with(told.substr(0, told.rfind(':') + 1));
  if (same_address) opts.listen_address = address;
  owner_ = make_engine(*metadata_, opts);
  ASSERT_TRUE(owner_);
  auto segment = owner_->allocate_segment("kv", kSegment);
  ASSERT_TRUE(segment.has_value());
  auto fresh = metadata_->lookup(detail::segment_key("kv"));
  ASSERT_TRUE(fresh.has_value() && fresh->has_value());

  if (same_address) {
    // The dead life's entry lingers (re-published through the store both engines share).
    ASSERT_TRUE(metadata_->publish(detail::segment_key("kv"), **old_record).has_value());
    auto batch = client_->submit(std::vector{write(0, 65536)});
    ASSERT_TRUE(batch.has_value());
    ASSERT_TRUE((*batch)->wait(10s).has_value());
    auto status = *(*batch)->status(0);
    ASSERT_FALSE(status.has_value());
    EXPECT_EQ(status.error().code(), Errc::StaleDescriptor) << status.error().describe();
    for (std::size_t i = 0; i < 65536; ++i) ASSERT_EQ(segment->data()[i], std::byte{0});
    ASSERT_TRUE(metadata_->publish(detail::segment_key("kv"), **fresh).has_value());
  }
  auto retries = client_->stats().retries;
  auto batch = client_->submit(std::vector{write(0, 65536), write(1 << 20, 3 << 20)});
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  ASSERT_TRUE((*batch)->wait(10s).has_value());
  EXPECT_EQ((*batch)->failed(), 0u) << (*(*batch)->status(0)).error().describe();
  EXPECT_GT(client_->stats().retries, retries);
  EXPECT_EQ(std::memcmp(segment->data(), local_.get(), 65536), 0);
  EXPECT_EQ(std::memcmp(segment->data() + (1 << 20), local_.get() + (1 << 20), 3 << 20), 0);
}

TEST_P(XferEngine, VanishedSegmentFailsCleanlyWithNotFound) {
  ASSERT_TRUE(owner_->unpublish("kv").has_value());
  owner_.reset();
  auto batch = client_->submit(std::vector{write(0, 4096)});
  ASSERT_TRUE(batch.has_value());
  ASSERT_TRUE((*batch)->wait(10s).has_value());
  auto status = *(*batch)->status(0);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code(), Errc::NotFound) << status.error().describe();
  // The cache now knows: the next submit is refused at once, and open_segment looks again.
  EXPECT_EQ(client_->submit(std::vector{write(0, 4096)}).error().code(), Errc::NotFound);
  EXPECT_EQ(client_->open_segment("kv").error().code(), Errc::NotFound);
}

std::vector<Setup> setups() {
  std::vector<Setup> all{{"shm", "file"}, {"tcp", "file"}, {"shm", "builtin"}, {"tcp", "builtin"}};
  if (!verbs_devices().empty()) {
    all.push_back({"verbs", "file"});
    all.push_back({"verbs", "builtin"});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(TransportsAndMetadata, XferEngine, ::testing::ValuesIn(setups()),
                         [](const auto& info) {
                           return std::string(info.param.transport) + "_" + info.param.metadata;
                         });

}  // namespace
}  // namespace rdmakit::xfer::testing
