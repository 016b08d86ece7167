// What a KV-cache user had to write by hand (issue #28 item 7): a notification at the segment owner once a
// batch's WRITEs landed (ordering, sender identity, only about our own segments, a bounded queue), a segment
// published only once its owner says it is filled, request lists prepared once and submitted again, and
// try_submit (in owner_process_test.cpp: it needs an owner that stops answering). Over shm and tcp.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>

#include "support/test_support.hpp"
#include "xfer/engine/record.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;
using rdmakit::testing::fill_pattern;
using rdmakit::testing::find_pattern_mismatch;

constexpr std::size_t kSegment = 1 << 20;
constexpr std::size_t kPiece = 16 << 10;  // 64 pieces per segment, as a per-layer KV block

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text)); }

class XferApi : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    metadata_ = std::make_unique<FileMetadataStore>(dir_.path());
    owner_ = make_engine(*metadata_, options("owner"));
    client_ = make_engine(*metadata_, options("client"));
    ASSERT_TRUE(owner_ && client_);
    auto segment = owner_->allocate_segment("kv", kSegment);
    ASSERT_TRUE(segment.has_value()) << segment.error().describe();
    remote_ = segment->data();
    local_ = make_buffer(kSegment);
    ASSERT_TRUE(client_->register_local(local_.get(), kSegment).has_value());
    auto handle = client_->open_segment("kv");
    ASSERT_TRUE(handle.has_value()) << handle.error().describe();
    kv_ = *handle;
  }
  EngineOptions options(const std::string& name, std::uint32_t max_notifications = 1024) {
    return EngineOptions{
        .name = name + "-" + GetParam(), .transports = {GetParam()}, .max_notifications = max_notifications};
  }
  // The whole segment as 64 WRITEs of 16 KiB, local piece k to remote piece 63 - k (scattered, as layers).
  std::vector<Request> block_writes() {
    std::vector<Request> requests;
    for (std::size_t k = 0; k < kSegment / kPiece; ++k)
      requests.push_back(
          Request{Op::Write, local_.get() + k * kPiece, kv_, kSegment - (k + 1) * kPiece, kPiece});
    return requests;
  }
  // Every remote piece holds the local piece block_writes() put there.
  void expect_block_landed() {
    for (std::size_t k = 0; k < kSegment / kPiece; ++k)
      ASSERT_EQ(std::memcmp(remote_ + kSegment - (k + 1) * kPiece, local_.get() + k * kPiece, kPiece), 0)
          << "piece " << k << " had not landed when the notification arrived";
  }

  TempDir dir_;
  std::unique_ptr<MetadataStore> metadata_;
  std::unique_ptr<Engine> owner_, client_;
  std::byte* remote_ = nullptr;
  Buffer local_;
  SegmentHandle kv_;
};

// Each round writes new bytes into every piece, then the owner, woken by the notification alone (it never
// looks at the memory before), finds every byte of the round in place, and the sender's proven name.
TEST_P(XferApi, NotificationArrivesOnlyAfterEveryWriteLanded) {
  auto requests = block_writes();
  for (std::uint32_t round = 0; round < 8; ++round) {
    fill_pattern(local_.get(), kSegment, 100 + round);
    const std::string message = "block " + std::to_string(round);
    auto batch = client_->submit(requests, bytes_of(message));
    ASSERT_TRUE(batch.has_value()) << batch.error().describe();
    auto got = owner_->wait_notification(10s);
    ASSERT_TRUE(got.has_value()) << got.error().describe();
    expect_block_landed();
    EXPECT_EQ(got->sender, "client-" + GetParam());
    EXPECT_EQ(got->segment, "kv");
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(got->message.data()), got->message.size()), message);
    ASSERT_TRUE((*batch)->wait(10s).has_value());
    EXPECT_EQ((*batch)->failed(), 0u);
    auto notified = (*batch)->notification();
    ASSERT_TRUE(notified.has_value());
    EXPECT_TRUE(notified->has_value()) << notified->error().describe();
  }
  EXPECT_FALSE(owner_->poll_notification().has_value()) << "a notification arrived twice";
  EXPECT_EQ(owner_->stats().notifications_received, 8u);
  // A batch without a message has no notification.
  auto plain = client_->submit(requests);
  ASSERT_TRUE(plain.has_value() && (*plain)->wait(10s).has_value());
  EXPECT_FALSE((*plain)->notification().has_value());
}

// The longest name an engine takes still fits its notification connection's proof (which carries the name
// and a suffix that marks it); the owner names the sender without the suffix. One byte more is refused.
TEST_P(XferApi, LongestEngineNameStillNotifies) {
  std::string longest(111, 'n');
  auto sender = make_engine(*metadata_, EngineOptions{.name = longest, .transports = {GetParam()}});
  ASSERT_TRUE(sender);
  ASSERT_TRUE(sender->register_local(local_.get(), kSegment).has_value());
  auto kv = sender->open_segment("kv");
  ASSERT_TRUE(kv.has_value()) << kv.error().describe();
  std::vector<Request> one{Request{Op::Write, local_.get(), *kv, 0, kPiece}};
  auto batch = sender->submit(one, bytes_of("hi"));
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  auto got = owner_->wait_notification(10s);
  ASSERT_TRUE(got.has_value()) << got.error().describe();
  EXPECT_EQ(got->sender, longest);
  ASSERT_TRUE((*batch)->wait(10s).has_value());
  EXPECT_EQ((*batch)->failed(), 0u);

  auto too_long =
      Engine::create(*metadata_, EngineOptions{.name = longest + "n", .transports = {GetParam()}});
  ASSERT_FALSE(too_long.has_value());
  EXPECT_EQ(too_long.error().code(), Errc::InvalidArgument);
  EXPECT_NE(too_long.error().message().find("111 bytes"), std::string::npos) << too_long.error().message();
  // A name cannot carry the proofs' connection marker (it would pass a data connection off as another kind).
  auto marked = Engine::create(*metadata_, EngineOptions{.name = "x\x1fnotify", .transports = {GetParam()}});
  ASSERT_FALSE(marked.has_value());
  EXPECT_EQ(marked.error().code(), Errc::InvalidArgument);
}

TEST_P(XferApi, BadNotificationsAreRefusedAtSubmit) {
  std::vector<std::byte> too_long(kMaxNotificationBytes + 1, std::byte{1});
  auto refused = client_->submit(block_writes(), too_long);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument) << refused.error().describe();
  EXPECT_EQ(client_->submit(std::vector<Request>{}, bytes_of("x")).error().code(), Errc::InvalidArgument);
  // Two owners in one notified batch: whom to tell is ambiguous.
  auto other = make_engine(*metadata_, options("other"));
  ASSERT_TRUE(other && other->allocate_segment("kv2", kSegment).has_value());
  auto kv2 = client_->open_segment("kv2");
  ASSERT_TRUE(kv2.has_value());
  std::vector requests{Request{Op::Write, local_.get(), kv_, 0, 4096},
                       Request{Op::Write, local_.get(), *kv2, 0, 4096}};
  auto two = client_->submit(requests, bytes_of("x"));
  ASSERT_FALSE(two.has_value());
  EXPECT_EQ(two.error().code(), Errc::InvalidArgument) << two.error().describe();
  EXPECT_EQ(client_->stats().requests, 0u) << "a refused batch was counted (or posted)";
}

// A notification about a name the owner no longer publishes is refused by the owner (counted, not queued).
TEST_P(XferApi, NotificationAboutASegmentTheOwnerDoesNotPublishIsRefused) {
  ASSERT_TRUE(owner_->unpublish("kv").has_value());  // the memory stays registered: the WRITE still lands
  auto batch = client_->submit(std::vector{Request{Op::Write, local_.get(), kv_, 0, 4096}}, bytes_of("x"));
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  ASSERT_TRUE((*batch)->wait(10s).has_value());
  for (auto deadline = std::chrono::steady_clock::now() + 5s;
       owner_->stats().notifications_refused == 0 && std::chrono::steady_clock::now() < deadline;)
    std::this_thread::sleep_for(2ms);
  EXPECT_EQ(owner_->stats().notifications_refused, 1u);
  EXPECT_FALSE(owner_->poll_notification().has_value());
}

// A peer that sends far more notifications than the owner takes costs it max_notifications queued, no more:
// the rest are dropped and counted, and once the owner took some, new ones are queued again.
TEST_P(XferApi, NotificationFloodIsBoundedAndCounted) {
  constexpr std::uint32_t kBound = 4, kFlood = 60;
  owner_.reset();
  owner_ = make_engine(*metadata_, options("owner", kBound));
  ASSERT_TRUE(owner_);
  auto segment = owner_->allocate_segment("flood", kSegment);
  ASSERT_TRUE(segment.has_value());
  auto flood = client_->open_segment("flood");
  ASSERT_TRUE(flood.has_value()) << flood.error().describe();
  std::vector request{Request{Op::Write, local_.get(), *flood, 0, 4096}};
  std::vector<std::shared_ptr<Batch>> batches;
  for (std::uint32_t i = 0; i < kFlood; ++i) {
    auto batch = client_->submit(request, bytes_of("n" + std::to_string(i)));
    ASSERT_TRUE(batch.has_value()) << batch.error().describe();
    batches.push_back(*batch);
  }
  for (auto& batch : batches) ASSERT_TRUE(batch->wait(20s).has_value());
  auto counted = [&] {
    return owner_->stats().notifications_received + owner_->stats().notifications_dropped;
  };
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       counted() < kFlood && std::chrono::steady_clock::now() < deadline;)
    std::this_thread::sleep_for(2ms);
  auto stats = owner_->stats();
  EXPECT_EQ(stats.notifications_received, kBound);
  EXPECT_EQ(stats.notifications_dropped, kFlood - kBound);
  // Batches complete in any order (they go over different connections), and so do their notifications:
  // the queue holds kBound distinct ones of the flood.
  std::set<std::string> queued;
  for (std::uint32_t i = 0; i < kBound; ++i) {
    auto got = owner_->poll_notification();
    ASSERT_TRUE(got.has_value()) << "queued notification " << i << " missing";
    std::string text(reinterpret_cast<const char*>(got->message.data()), got->message.size());
    ASSERT_TRUE(text.starts_with("n") && std::stoul(text.substr(1)) < kFlood) << text;
    queued.insert(text);
  }
  EXPECT_EQ(queued.size(), kBound);
  EXPECT_FALSE(owner_->poll_notification().has_value()) << "more than max_notifications were queued";
  auto again = client_->submit(request, bytes_of("after"));
  ASSERT_TRUE(again.has_value() && (*again)->wait(10s).has_value());
  auto got = owner_->wait_notification(10s);
  ASSERT_TRUE(got.has_value()) << got.error().describe();
  EXPECT_EQ(got->message.size(), 5u);
}

// Until publish_ready() the name is not in the metadata at all: a reader gets NotFound, never the unfilled
// memory; afterwards it reads exactly what the owner filled.
TEST_P(XferApi, UnreadySegmentIsNotFoundUntilPublishReady) {
  auto pool = owner_->allocate_unpublished("pool", kSegment);
  ASSERT_TRUE(pool.has_value()) << pool.error().describe();
  auto early = client_->open_segment("pool");
  ASSERT_FALSE(early.has_value());
  EXPECT_EQ(early.error().code(), Errc::NotFound) << early.error().describe();
  auto raw = metadata_->lookup(detail::segment_key("pool"));
  ASSERT_TRUE(raw.has_value());
  EXPECT_FALSE(raw->has_value()) << "an unready segment's record is in the metadata";
  EXPECT_EQ(owner_->allocate_unpublished("pool", 4096).error().code(), Errc::InvalidArgument);
  EXPECT_EQ(owner_->publish_ready("nothing").error().code(), Errc::NotFound);

  fill_pattern(pool->data(), kSegment, 77);
  ASSERT_TRUE(owner_->publish_ready("pool").has_value());
  EXPECT_EQ(owner_->publish_ready("pool").error().code(), Errc::InvalidArgument);
  auto handle = client_->open_segment("pool");
  ASSERT_TRUE(handle.has_value()) << handle.error().describe();
  std::memset(local_.get(), 0, kSegment);
  auto batch = client_->submit(std::vector{Request{Op::Read, local_.get(), *handle, 0, kSegment}});
  ASSERT_TRUE(batch.has_value() && (*batch)->wait(10s).has_value());
  ASSERT_TRUE((*(*batch)->status(0)).has_value());
  EXPECT_EQ(find_pattern_mismatch(local_.get(), kSegment, 77), kSegment);
  // Dropping one never made ready leaves no trace in the metadata.
  ASSERT_TRUE(owner_->allocate_unpublished("never", 4096).has_value());
  ASSERT_TRUE(owner_->unpublish("never").has_value());
  EXPECT_EQ(owner_->publish_ready("never").error().code(), Errc::NotFound);
}

// One list of 64 requests, prepared once, carries new bytes in each of several submits; the engine counts
// its requests each time. A list whose local memory was unregistered, or from another engine, is refused.
TEST_P(XferApi, PreparedListIsSubmittedAgainAndAgain) {
  auto prepared = client_->prepare(block_writes());
  ASSERT_TRUE(prepared.has_value()) << prepared.error().describe();
  EXPECT_EQ((*prepared)->size(), kSegment / kPiece);
  for (std::uint32_t round = 0; round < 4; ++round) {
    fill_pattern(local_.get(), kSegment, 200 + round);
    auto batch = round % 2 == 0 ? client_->submit(**prepared) : client_->try_submit(**prepared);
    ASSERT_TRUE(batch.has_value()) << batch.error().describe();
    ASSERT_TRUE((*batch)->wait(10s).has_value());
    ASSERT_EQ((*batch)->size(), kSegment / kPiece);
    EXPECT_EQ((*batch)->failed(), 0u);
    expect_block_landed();
  }
  EXPECT_EQ(client_->stats().requests, 4 * kSegment / kPiece);
  auto bad = client_->prepare(std::vector{Request{Op::Write, local_.get(), kv_, kSegment, 1}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), Errc::InvalidArgument) << bad.error().describe();
  EXPECT_EQ(owner_->submit(**prepared).error().code(), Errc::InvalidArgument);
  ASSERT_TRUE(client_->unregister_local(local_.get()).has_value());
  auto stale = client_->submit(**prepared);
  ASSERT_FALSE(stale.has_value());
  EXPECT_EQ(stale.error().code(), Errc::InvalidArgument) << stale.error().describe();
}

// Over the bound a non-blocking submit can never succeed: refused as such, not "would block".
TEST_P(XferApi, TrySubmitRefusesABatchLargerThanTheBound) {
  auto small = make_engine(
      *metadata_,
      EngineOptions{.name = "small-" + GetParam(), .transports = {GetParam()}, .max_inflight_per_peer = 2});
  ASSERT_TRUE(small);
  auto buffer = make_buffer(kSegment);
  ASSERT_TRUE(small->register_local(buffer.get(), kSegment).has_value());
  auto kv = small->open_segment("kv");
  ASSERT_TRUE(kv.has_value());
  std::vector<Request> requests;
  for (std::uint64_t k = 0; k < 3; ++k)  // not adjacent: three work requests
    requests.push_back(Request{Op::Write, buffer.get() + k * 8192, *kv, k * 8192, 4096});
  auto refused = small->try_submit(requests);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument) << refused.error().describe();
  EXPECT_NE(refused.error().message().find("max_inflight_per_peer 2"), std::string::npos);
  requests.pop_back();
  auto fits = small->try_submit(requests);
  ASSERT_TRUE(fits.has_value()) << fits.error().describe();
  ASSERT_TRUE((*fits)->wait(10s).has_value());
  EXPECT_EQ((*fits)->failed(), 0u);
  EXPECT_EQ(std::memcmp(remote_ + 8192, buffer.get() + 8192, 4096), 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, XferApi, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdmakit::xfer::testing
