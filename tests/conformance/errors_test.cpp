// Every error status, provoked on purpose, with verbs' rules: the failing operation reports its status,
// what was posted behind it is flushed (also what is posted later), the connection stays in the error state
// and reports that first failure, and target memory is untouched.
#include <algorithm>
#include <cstring>

#include "conformance/fixture.hpp"

namespace rdmakit::conformance {
namespace {

using testing::fill_pattern;

class Errors : public Conformance {
 protected:
  void SetUp() override {
    connect_pair(client_, server_);
    ASSERT_TRUE(client_.connection);
    source_ = region(*client_.context, 4096, Access::LocalWrite);
    result_ = region(*client_.context, 4096, Access::LocalWrite);
    target_ = region(*server_.context, 4096,
                     Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic);
    read_only_ = region(*server_.context, 4096, Access::RemoteRead);
    ASSERT_TRUE(source_ && result_ && target_ && read_only_);
    fill_pattern(source_->data(), 4096, 1);
  }

  // Posts `failing` followed by a WRITE and checks: failing completes with `expected`, the WRITE behind
  // it with Flushed, a later post is accepted and flushed too, and the connection reports the failure:
  // TransportFailure with the very status the operation completed with.
  void expect_failure(const WorkRequest& failing, Status expected) {
    Segment tail = source_->slice(0, 8);
    WorkRequest chain[] = {failing, WorkRequest{.opcode = Opcode::Write,
                                                .local = std::span(&tail, 1),
                                                .remote = target_->descriptor().at(4000)}};
    auto first = RDMAKIT_ASSERT_OK(client_.connection->post(chain));
    Completion failed = wait(*client_.connection, first);
    EXPECT_EQ(failed.status, expected) << "got " << to_string(failed.status);
    EXPECT_EQ(failed.opcode, failing.opcode);
    Completion flushed = wait(*client_.connection, first + 1);
    EXPECT_EQ(flushed.status, Status::Flushed) << "got " << to_string(flushed.status);
    auto health = client_.connection->health();
    ASSERT_FALSE(health.has_value()) << "the failure is not reported by health()";
    EXPECT_EQ(health.error().code(), Errc::TransportFailure) << health.error().describe();
    EXPECT_EQ(health.error().status(), failed.status) << health.error().describe();
    auto again = RDMAKIT_ASSERT_OK(client_.connection->write(tail, target_->descriptor().at(4000)));
    EXPECT_EQ(wait(*client_.connection, again).status, Status::Flushed);
    EXPECT_TRUE(client_.connection->stats().failed);
    EXPECT_FALSE(client_.connection->stats().failure.empty());
  }

  // The client's connection failed with `status`: health() says so, posts behind it flush.
  void expect_failure_reported(Status status) {
    auto health = client_.connection->health();
    ASSERT_FALSE(health.has_value());
    EXPECT_EQ(health.error().code(), Errc::TransportFailure) << health.error().describe();
    EXPECT_EQ(health.error().status(), status) << health.error().describe();
    auto again =
        RDMAKIT_ASSERT_OK(client_.connection->write(source_->slice(0, 8), target_->descriptor().at(4000)));
    EXPECT_EQ(wait(*client_.connection, again).status, Status::Flushed);
  }

  bool target_untouched() const {
    auto* bytes = static_cast<const std::uint8_t*>(target_->data());
    return std::all_of(bytes, bytes + 4096, [](std::uint8_t b) { return b == 0; });
  }

  std::shared_ptr<MemoryRegion> source_, result_, target_, read_only_;
  Segment local_{};
};

TEST_P(Errors, WriteWithUnknownKeyIsRemoteAccess) {
  local_ = source_->slice(0, 64);
  RemoteAddress bad = target_->descriptor().at(0);
  bad.rkey ^= 0x5a5a5a;
  expect_failure(WorkRequest{.opcode = Opcode::Write, .local = std::span(&local_, 1), .remote = bad},
                 Status::RemoteAccess);
  EXPECT_TRUE(target_untouched());
}

TEST_P(Errors, WritePastTheEndIsRemoteAccess) {
  local_ = source_->slice(0, 64);
  expect_failure(WorkRequest{.opcode = Opcode::Write,
                             .local = std::span(&local_, 1),
                             .remote = target_->descriptor().at(4096 - 63)},
                 Status::RemoteAccess);
  EXPECT_TRUE(target_untouched());
}

TEST_P(Errors, WriteWithoutRemoteWriteRightIsRemoteAccess) {
  local_ = source_->slice(0, 64);
  expect_failure(
      WorkRequest{
          .opcode = Opcode::Write, .local = std::span(&local_, 1), .remote = read_only_->descriptor().at(0)},
      Status::RemoteAccess);
  auto* bytes = static_cast<const std::uint8_t*>(read_only_->data());
  EXPECT_TRUE(std::all_of(bytes, bytes + 4096, [](std::uint8_t b) { return b == 0; }));
}

TEST_P(Errors, ReadWithoutRemoteReadRightIsRemoteAccess) {
  auto write_only = region(*server_.context, 64, Access::LocalWrite | Access::RemoteWrite);
  ASSERT_TRUE(write_only);
  local_ = result_->slice(0, 64);
  expect_failure(
      WorkRequest{
          .opcode = Opcode::Read, .local = std::span(&local_, 1), .remote = write_only->descriptor().at(0)},
      Status::RemoteAccess);
}

TEST_P(Errors, AtomicWithoutAtomicRightIsRemoteAccess) {
  auto no_atomic =
      region(*server_.context, 64, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
  ASSERT_TRUE(no_atomic);
  local_ = result_->slice(0, 8);
  expect_failure(WorkRequest{.opcode = Opcode::FetchAdd,
                             .local = std::span(&local_, 1),
                             .remote = no_atomic->descriptor().at(0),
                             .compare_add = 1},
                 Status::RemoteAccess);
  EXPECT_EQ(*static_cast<std::uint64_t*>(no_atomic->data()), 0u);
}

TEST_P(Errors, MisalignedAtomicIsRemoteInvalidRequest) {
  local_ = result_->slice(0, 8);
  WorkRequest misaligned{.opcode = Opcode::CompareSwap,
                         .local = std::span(&local_, 1),
                         .remote = target_->descriptor().at(4),
                         .compare_add = 0,
                         .swap = 7};
  if (client_.context->capabilities().misaligned_atomic_refused_at_post) {
    // verbs rule: rxe (and mlx5) refuse a misaligned atomic in ibv_post_send (EINVAL) before it reaches
    // the wire, so it is an error at post, and the connection stays usable.
    auto posted = client_.connection->post(std::span(&misaligned, 1));
    ASSERT_FALSE(posted.has_value());
    EXPECT_EQ(posted.error().code(), Errc::InvalidArgument);
    EXPECT_TRUE(client_.connection->health().has_value());
  } else {
    expect_failure(misaligned, Status::RemoteInvalidRequest);
  }
  EXPECT_TRUE(target_untouched());
}

TEST_P(Errors, LocalSegmentOutsideItsRegionIsLocalProtection) {
  local_ = source_->slice(4000, 200);  // runs 104 bytes past the region
  expect_failure(
      WorkRequest{
          .opcode = Opcode::Write, .local = std::span(&local_, 1), .remote = target_->descriptor().at(0)},
      Status::LocalProtection);
  EXPECT_TRUE(target_untouched());
}

TEST_P(Errors, ReadIntoMemoryWithoutLocalWriteIsLocalProtection) {
  auto read_only_local = region(*client_.context, 64, Access::RemoteRead);
  ASSERT_TRUE(read_only_local);
  local_ = read_only_local->slice(0, 64);
  expect_failure(
      WorkRequest{
          .opcode = Opcode::Read, .local = std::span(&local_, 1), .remote = target_->descriptor().at(0)},
      Status::LocalProtection);
}

TEST_P(Errors, SendLongerThanTheReceiveIsRemoteInvalidRequestAndLocalLength) {
  auto small = region(*server_.context, 16, Access::LocalWrite);
  ASSERT_TRUE(small);
  auto recv_id = RDMAKIT_ASSERT_OK(server_.connection->post_recv(small->whole().value()));
  local_ = source_->slice(0, 100);
  // verbs rule: HCAs report LOC_LEN_ERR at the receiver and REM_INV_REQ_ERR at the sender; Soft-RoCE
  // (rxe, kernel 6.1) reports LOC_QP_OP_ERR and REM_OP_ERR. rdmakit passes the provider's status through,
  // so either pair is right, never a mix.
  WorkRequest send{.opcode = Opcode::Send, .local = std::span(&local_, 1)};
  auto first = RDMAKIT_ASSERT_OK(client_.connection->post(std::span(&send, 1)));
  Status sender = wait(*client_.connection, first).status;
  Status receiver = wait(*server_.connection, recv_id).status;
  const bool hca = sender == Status::RemoteInvalidRequest && receiver == Status::LocalLength;
  const bool rxe = sender == Status::RemoteOperation && receiver == Status::LocalQpOperation;
  EXPECT_TRUE(hca || rxe) << "sender " << to_string(sender) << ", receiver " << to_string(receiver);
  auto health = server_.connection->health();
  ASSERT_FALSE(health.has_value()) << "the receiver's failed receive did not fail its connection";
  EXPECT_EQ(health.error().status(), receiver) << health.error().describe();
  expect_failure_reported(sender);
}

TEST_P(Errors, SendWithNoReceivePostedIsRnrRetryExceeded) {
  local_ = source_->slice(0, 100);
  auto start = std::chrono::steady_clock::now();
  expect_failure(WorkRequest{.opcode = Opcode::Send, .local = std::span(&local_, 1)},
                 Status::RnrRetryExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << "RNR failure was not bounded by rnr_timeout";
}

TEST_P(Errors, DeregisteredRegionIsRemoteAccess) {
  auto doomed = region(*server_.context, 4096, Access::LocalWrite | Access::RemoteWrite);
  ASSERT_TRUE(doomed);
  RemoteRegion descriptor = doomed->descriptor();
  doomed.reset();  // deregistered; the memory itself may still be mapped (caller memory)
  local_ = source_->slice(0, 64);
  expect_failure(
      WorkRequest{.opcode = Opcode::Write, .local = std::span(&local_, 1), .remote = descriptor.at(0)},
      Status::RemoteAccess);
}

TEST_P(Errors, DescriptorOfAnotherContextIsStale) {
  auto other = open_context(true);
  ASSERT_TRUE(other);
  auto foreign = region(*other, 4096, Access::LocalWrite | Access::RemoteWrite);
  ASSERT_TRUE(foreign);
  auto posted = client_.connection->write(source_->slice(0, 8), foreign->descriptor().at(0));
  ASSERT_FALSE(posted.has_value());
  EXPECT_EQ(posted.error().code(), Errc::StaleDescriptor);
  EXPECT_TRUE(client_.connection->health().has_value()) << "a refused post must not break the connection";
}

TEST_P(Errors, ClosingFlushesPostedReceives) {
  auto inbox = region(*server_.context, 64, Access::LocalWrite);
  ASSERT_TRUE(inbox);
  auto a = RDMAKIT_ASSERT_OK(server_.connection->post_recv(inbox->slice(0, 32)));
  auto b = RDMAKIT_ASSERT_OK(server_.connection->post_recv(inbox->slice(32, 32)));
  server_.connection->close();
  EXPECT_EQ(wait(*server_.connection, a).status, Status::Flushed);
  EXPECT_EQ(wait(*server_.connection, b).status, Status::Flushed);
  EXPECT_EQ(server_.connection->post_recv(inbox->slice(0, 8)).error().code(), Errc::ConnectionBroken);
}

TEST_P(Errors, MalformedRequestsAreRefusedAtPost) {
  auto check = [&](const WorkRequest& request, const char* what) {
    auto posted = client_.connection->post(std::span(&request, 1));
    ASSERT_FALSE(posted.has_value()) << what;
    EXPECT_EQ(posted.error().code(), Errc::InvalidArgument) << what;
    EXPECT_FALSE(posted.error().message().empty());
  };
  Segment seven = result_->slice(0, 7);
  check(
      WorkRequest{
          .opcode = Opcode::FetchAdd, .local = std::span(&seven, 1), .remote = target_->descriptor().at(0)},
      "an atomic with a 7-byte result segment");
  check(WorkRequest{.opcode = Opcode::Recv}, "a receive opcode in post()");
  std::vector<Segment> many(4096, source_->slice(0, 1));
  check(WorkRequest{.opcode = Opcode::Write, .local = many, .remote = target_->descriptor().at(0)},
        "4096 scatter-gather entries");
  auto empty = client_.connection->post({});
  ASSERT_FALSE(empty.has_value());
  EXPECT_TRUE(client_.connection->health().has_value()) << "refused posts must not break the connection";
}

TEST_P(Errors, BadRegistrationsAreRefused) {
  std::byte buffer[64];
  auto null = client_.context->register_memory(nullptr, 64, Access::LocalWrite);
  ASSERT_FALSE(null.has_value());
  EXPECT_EQ(null.error().code(), Errc::InvalidArgument);
  auto zero = client_.context->register_memory(buffer, 0, Access::LocalWrite);
  ASSERT_FALSE(zero.has_value());
  auto rule = client_.context->register_memory(buffer, 64, Access::RemoteWrite);  // verbs: needs LocalWrite
  ASSERT_FALSE(rule.has_value());
  EXPECT_NE(rule.error().message().find("LocalWrite"), std::string::npos) << rule.error().message();
}

INSTANTIATE_TEST_SUITE_P(Transports, Errors, ::testing::ValuesIn(conformance_transports()),
                         transport_param_name);

}  // namespace
}  // namespace rdmakit::conformance
