// A failure in the middle of a chain. The engine signals only the last work request of each chain it
// posts and credits the ones before a completion with success, which is right only if completions are
// applied in their queue's order. The fault transport fails the 6th WRITE of one chain: the five before
// it landed without completions of their own and must be reported ok, the failed one must be reported
// failed with its status and leave the owner's bytes alone, and the ten behind it (Flushed, which the
// engine retries on a new connection) must land.
#include <gtest/gtest.h>

#include <cstring>

#include "rdmakit/fault.hpp"
#include "support/test_support.hpp"
#include "xfer/engine/engine_impl.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;
using rdmakit::testing::fill_pattern;

constexpr std::size_t kRequests = 16;
constexpr std::size_t kBlock = 64 << 10;
constexpr std::size_t kFailed = 5;

TEST(XferChain, FailureMidChainCreditsOnlyTheWorkRequestsBeforeIt) {
  TempDir dir;
  FileMetadataStore metadata(dir.path());
  // One connection and a gap between the blocks: one chain of 16 work requests, nothing coalesced.
  EngineOptions options{.transports = {"fault:tcp"}, .transport = "fault:tcp", .connections_per_rail = 1};
  options.name = "owner";
  auto owner = make_engine(metadata, options);
  options.name = "client";
  auto client = make_engine(metadata, options);
  ASSERT_TRUE(owner && client);
  auto segment = owner->allocate_segment("kv", 2 * kRequests * kBlock);
  ASSERT_TRUE(segment.has_value()) << segment.error().describe();
  std::memset(segment->data(), 0, segment->size());
  auto local = make_buffer(2 * kRequests * kBlock);
  fill_pattern(local.get(), 2 * kRequests * kBlock, 29);
  ASSERT_TRUE(client->register_local(local.get(), 2 * kRequests * kBlock).has_value());
  auto kv = client->open_segment("kv");
  ASSERT_TRUE(kv.has_value()) << kv.error().describe();

  auto* injector = fault::injector(static_cast<detail::EngineImpl&>(*client).rail_context(0));
  ASSERT_NE(injector, nullptr);
  ASSERT_TRUE(injector
                  ->add(fault::Rule{.action = fault::Rule::Action::Fail,
                                    .opcode = Opcode::Write,
                                    .status = Status::RemoteInvalidRequest,  // not retried by the engine
                                    .skip = kFailed})
                  .has_value());

  std::vector<Request> requests;
  for (std::size_t i = 0; i < kRequests; ++i) {
    auto offset = 2 * i * kBlock;
    requests.push_back(Request{Op::Write, local.get() + offset, *kv, offset, kBlock});
  }
  auto batch = client->submit(requests);
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  ASSERT_TRUE((*batch)->wait(30s).has_value());
  auto stats = client->stats();
  EXPECT_EQ(stats.work_requests, kRequests + stats.retries) << "one per request, plus the retried ones";
  for (std::size_t i = 0; i < kRequests; ++i) {
    auto status = (*batch)->status(i);
    ASSERT_TRUE(status.has_value()) << "request " << i << " still in flight after wait()";
    auto offset = 2 * i * kBlock;
    bool landed = std::memcmp(segment->data() + offset, local.get() + offset, kBlock) == 0;
    if (i == kFailed) {
      ASSERT_FALSE(status->has_value()) << "the failed WRITE reported success";
      EXPECT_EQ(status->error().status(), Status::RemoteInvalidRequest) << status->error().describe();
      EXPECT_FALSE(landed) << "the failed WRITE reached the owner";
    } else {
      EXPECT_TRUE(status->has_value()) << "request " << i << ": " << status->error().describe();
      EXPECT_TRUE(landed) << "request " << i << " reported " << (status->has_value() ? "ok" : "failed")
                          << " but its bytes are not at the owner";
    }
  }
  EXPECT_EQ((*batch)->failed(), 1u);
  EXPECT_GE(stats.retries, kRequests - kFailed - 1) << "the Flushed ones behind it were retried";
}

}  // namespace
}  // namespace rdmakit::xfer::testing
