// The engine against an owner in another process: back-pressure against an owner that stopped answering
// (SIGSTOP), and the transport a default engine chooses for an owner on the same host.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>

#include "xfer/peer_process.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;

// With one work request allowed in flight to the owner, and the owner stopped (over tcp a WRITE completes
// only when the owner's process has taken the bytes), the first request occupies the only credit: submit()
// gives up on the others after submit_timeout with ResourceExhausted naming the limit, instead of queueing
// them without bound or blocking forever. The posted one completes once the owner runs again.
TEST(XferOwnerProcess, BackPressureAgainstAStoppedOwnerTimesOutNamingTheLimit) {
  constexpr std::size_t kSize = 4 << 20;
  TempDir dir;
  PeerProcess owner(dir.path(), "stopped", kSize, "tcp");
  ASSERT_TRUE(owner.ready());
  FileMetadataStore metadata(dir.path());
  EngineOptions options{.name = "client",
                        .transports = {"tcp"},
                        .max_inflight_per_peer = 1,
                        .peer_timeout = 60s,  // the owner is silent on purpose: only submit_timeout applies
                        .submit_timeout = 300ms};
  auto engine = make_engine(metadata, options);
  ASSERT_TRUE(engine);
  auto local = make_buffer(kSize);
  std::memset(local.get(), 0x3c, kSize);
  ASSERT_TRUE(engine->register_local(local.get(), kSize).has_value());
  auto segment = engine->open_segment("stopped");  // connects while the owner still runs
  ASSERT_TRUE(segment.has_value()) << segment.error().describe();

  owner.signal(SIGSTOP);
  std::vector<Request> requests;
  for (std::uint64_t k = 0; k < 4; ++k) {
    requests.push_back(Request{Op::Write, local.get() + k * (1 << 20), *segment, k * (1 << 20), 1 << 20});
  }
  auto started = std::chrono::steady_clock::now();
  auto batch = engine->submit(requests);
  auto took = std::chrono::steady_clock::now() - started;
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  EXPECT_GE(took, options.submit_timeout) << "submit() returned before the back-pressure deadline";
  EXPECT_LT(took, options.submit_timeout + 10s) << "submit() blocked well past submit_timeout";
  EXPECT_EQ((*batch)->failed(), 3u);
  for (std::size_t i = 1; i < requests.size(); ++i) {
    auto status = (*batch)->status(i);
    ASSERT_TRUE(status.has_value()) << "request " << i << " neither posted nor failed";
    ASSERT_FALSE(status->has_value()) << "request " << i << " was posted past the bound";
    EXPECT_EQ(status->error().code(), Errc::ResourceExhausted) << status->error().describe();
    EXPECT_NE(status->error().message().find("max_inflight_per_peer 1"), std::string::npos)
        << status->error().describe();
  }
  EXPECT_FALSE((*batch)->status(0).has_value()) << "the posted WRITE finished while its owner was stopped";

  owner.signal(SIGCONT);
  ASSERT_TRUE((*batch)->wait(30s).has_value());
  auto first = *(*batch)->status(0);
  EXPECT_TRUE(first.has_value()) << first.error().describe();
  EXPECT_EQ(engine->stats().peak_inflight_per_peer, 1u);
}

// try_submit against the same stopped owner: with the one credit taken by a posted WRITE, a second batch is
// refused at once ("would block") and posts nothing; once the owner runs again and the first completes, the
// same call posts and lands.
TEST(XferOwnerProcess, TrySubmitWouldBlockAtOnceAndPostsNothing) {
  constexpr std::size_t kSize = 1 << 20;
  TempDir dir;
  PeerProcess owner(dir.path(), "stopped", kSize, "tcp");
  ASSERT_TRUE(owner.ready());
  FileMetadataStore metadata(dir.path());
  EngineOptions options{
      .name = "client", .transports = {"tcp"}, .max_inflight_per_peer = 1, .peer_timeout = 60s};
  auto engine = make_engine(metadata, options);
  ASSERT_TRUE(engine);
  auto local = make_buffer(kSize);
  std::memset(local.get(), 0x3c, kSize);
  ASSERT_TRUE(engine->register_local(local.get(), kSize).has_value());
  auto segment = engine->open_segment("stopped");
  ASSERT_TRUE(segment.has_value()) << segment.error().describe();
  owner.signal(SIGSTOP);
  std::vector first{Request{Op::Write, local.get(), *segment, 0, 4096}};
  auto posted = engine->try_submit(first);
  ASSERT_TRUE(posted.has_value()) << posted.error().describe();
  auto work_requests = engine->stats().work_requests;
  std::vector second{Request{Op::Write, local.get() + 8192, *segment, 8192, 4096}};
  auto started = std::chrono::steady_clock::now();
  auto blocked = engine->try_submit(second);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s) << "try_submit waited on back-pressure";
  ASSERT_FALSE(blocked.has_value());
  EXPECT_EQ(blocked.error().code(), Errc::ResourceExhausted) << blocked.error().describe();
  EXPECT_NE(blocked.error().message().find("would block"), std::string::npos) << blocked.error().describe();
  EXPECT_EQ(engine->stats().work_requests, work_requests) << "a refused try_submit posted work requests";
  owner.signal(SIGCONT);
  ASSERT_TRUE((*posted)->wait(30s).has_value());
  EXPECT_TRUE((*(*posted)->status(0)).has_value());
  auto later = engine->try_submit(second);
  ASSERT_TRUE(later.has_value()) << later.error().describe();
  ASSERT_TRUE((*later)->wait(30s).has_value());
  EXPECT_TRUE((*(*later)->status(0)).has_value());
  EXPECT_EQ(engine->stats().peak_inflight_per_peer, 1u);
}

// Default options on both sides (shm and tcp offered): an owner on this host is reached over shm, and only
// the shm rail carries work requests.
TEST(XferOwnerProcess, DefaultEngineChoosesShmForAnOwnerOnThisHost) {
  constexpr std::size_t kSize = 1 << 20;
  TempDir dir;
  PeerProcess owner(dir.path(), "local", kSize, "default");
  ASSERT_TRUE(owner.ready());
  FileMetadataStore metadata(dir.path());
  auto engine = make_engine(metadata, EngineOptions{});
  ASSERT_TRUE(engine);
  auto out = make_buffer(kSize), back = make_buffer(kSize);
  for (std::size_t i = 0; i < kSize; ++i) out.get()[i] = static_cast<std::byte>(i * 7 + 1);
  std::memset(back.get(), 0, kSize);
  ASSERT_TRUE(engine->register_local(out.get(), kSize).has_value());
  ASSERT_TRUE(engine->register_local(back.get(), kSize).has_value());
  auto segment = engine->open_segment("local");
  ASSERT_TRUE(segment.has_value()) << segment.error().describe();
  auto info = engine->segment_info(*segment);
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  EXPECT_EQ(info->transport, "shm");

  for (auto op : {Op::Write, Op::Read}) {
    auto local = op == Op::Write ? out.get() : back.get();
    auto batch = engine->submit(std::vector{Request{op, local, *segment, 0, kSize}});
    ASSERT_TRUE(batch.has_value()) << batch.error().describe();
    ASSERT_TRUE((*batch)->wait(30s).has_value());
    auto status = *(*batch)->status(0);
    ASSERT_TRUE(status.has_value()) << status.error().describe();
  }
  EXPECT_EQ(std::memcmp(out.get(), back.get(), kSize), 0);

  auto stats = engine->stats();
  ASSERT_EQ(stats.rails.size(), 2u);
  std::uint64_t per_rail_sum = 0;
  for (const auto& rail : stats.rails) {
    per_rail_sum += rail.work_requests;
    if (rail.transport == "shm") {
      EXPECT_GT(rail.work_requests, 0u);
    } else {
      EXPECT_EQ(rail.work_requests, 0u) << "the " << rail.transport << " rail carried work requests";
    }
  }
  EXPECT_EQ(per_rail_sum, stats.work_requests);
}

}  // namespace
}  // namespace rdmakit::xfer::testing
