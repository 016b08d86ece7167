// The handshake that proves the job secret on every communicator connection (src/coll/handshake.hpp):
// ranks that do not share the secret cannot form a communicator, ranks that do can (over shm and tcp),
// and the message decoder rejects what is not a handshake message.
#include <gtest/gtest.h>

#include <future>

#include "coll/handshake.hpp"
#include "coll_harness.hpp"
#include "support/test_support.hpp"

namespace rdmakit::coll::testing {
namespace {

using namespace std::chrono_literals;

TEST(CollHandshake, RanksWithDifferentSecretsCannotFormACommunicator) {
  rdmakit::testing::expect_warning("did not prove the job secret");
  auto store = bootstrap::make_memory_store();
  auto create = [&](int rank, const char* secret) {
    return Communicator::create(store, rank, 2,
                                CommOptions{.network_transport = "tcp",
                                            .local_transport = "tcp",
                                            .timeout = 2000ms,
                                            .bootstrap_timeout = 1500ms,
                                            .job_secret = secret});
  };
  auto rank0 = std::async(std::launch::async, create, 0, "the secret of the real job");
  auto rank1 = create(1, "a guess at the secret of the job");
  auto comm0 = rank0.get();
  ASSERT_FALSE(rank1.has_value()) << "a rank with the wrong secret joined";
  ASSERT_FALSE(comm0.has_value()) << "rank 0 formed a communicator with a rank that did not prove the secret";
  EXPECT_EQ(rank1.error().code(), Errc::ConnectionRefused) << rank1.error().describe();
  EXPECT_NE(rank1.error().message().find("job secret"), std::string::npos) << rank1.error().describe();
  EXPECT_NE(comm0.error().message().find("refused for failing the handshake"), std::string::npos)
      << comm0.error().describe();
}

TEST(CollHandshake, RanksWithTheSameSecretRunOverShmAndTcp) {
  CommOptions options = small_chunks("shm");
  options.job_secret = "the secret of the real job";
  options.host_id = "";  // every rank on this host: shm between them
  run_ranks(3, options, [](Communicator& comm) {
    std::vector<float> data(100, 1.0f);
    ASSERT_TRUE(
        comm.allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum).has_value());
    EXPECT_EQ(data[99], 3.0f);
  });
}

TEST(CollHandshake, ASecretTooShortIsAnErrorNamingTheOption) {
  auto comm = Communicator::create(bootstrap::make_memory_store(), 0, 1,
                                   CommOptions{.network_transport = "tcp", .job_secret = "short"});
  ASSERT_FALSE(comm.has_value());
  EXPECT_NE(comm.error().message().find("RDMAKIT_JOB_SECRET"), std::string::npos) << comm.error().describe();
}

TEST(CollHandshake, TheDecoderRejectsWhatIsNotAHandshakeMessage) {
  detail::HandshakeMessage message{.type = 2, .rank = 1, .world = 4};
  auto bytes = message.encode();
  auto decoded = detail::HandshakeMessage::decode(bytes, 2);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->rank, 1u);
  EXPECT_EQ(decoded->world, 4u);
  EXPECT_FALSE(detail::HandshakeMessage::decode(bytes, 3).has_value()) << "wrong type accepted";
  EXPECT_FALSE(detail::HandshakeMessage::decode(std::span(bytes).first(100), 2).has_value())
      << "short accepted";
  bytes[0] = std::byte{'X'};
  EXPECT_FALSE(detail::HandshakeMessage::decode(bytes, 2).has_value()) << "bad magic accepted";
}

}  // namespace
}  // namespace rdmakit::coll::testing
