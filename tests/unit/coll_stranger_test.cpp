// A stranger who learnt what the store holds (rank 0's listener and whatever rank 0 published there)
// tries to join a communicator as rank 1 before the real rank 1 does: it must neither write into rank 0's
// staging memory nor take rank 1's place, and the real ranks must still run their collectives.
// The ranks are threads over an in-memory store (the store leaked, in the worst case), with a job secret
// from the environment as a launch would set it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <map>

#include "coll_harness.hpp"
#include "rdmakit/context.hpp"
#include "stranger.hpp"
#include "support/test_support.hpp"

namespace rdmakit::coll::testing {
namespace {

using namespace std::chrono_literals;

// Forwards to the shared store, but holds rank 1 back until the stranger has made its attempt.
class HeldBackStore final : public bootstrap::Store {
 public:
  HeldBackStore(std::shared_ptr<bootstrap::Store> inner, std::shared_future<void> release)
      : inner_(std::move(inner)), release_(std::move(release)) {}
  Result<void> set(std::string_view key, std::string_view value) override { return inner_->set(key, value); }
  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override {
    if (key.find("coll/net/") != std::string_view::npos) release_.wait();
    return inner_->get(key, timeout);
  }

 private:
  std::shared_ptr<bootstrap::Store> inner_;
  std::shared_future<void> release_;
};

struct Attempt {
  bool found_descriptor = false;
  bool wrote = false;  // a WRITE into rank 0's memory completed successfully
};

// The stranger: connects to rank 0's listener under a name that says "rank 1", writes where any
// descriptor it found points, and answers whatever rank 0 says with made-up bytes.
Attempt stranger(bootstrap::Store& store) {
  Attempt attempt;
  auto record = store.get("coll/net/0", 10s);
  if (!record) return ADD_FAILURE() << record.error().describe(), attempt;
  std::string address = record->substr(0, record->find('\n'));
  auto context = Context::open(Options{.transport = "tcp", .name = "stranger:1"});
  if (!context) return ADD_FAILURE() << context.error().describe(), attempt;
  auto buffer = (*context)->allocate(4096, Access::LocalWrite);
  auto connection = (*context)->connect(address);
  if (!buffer || !connection) return attempt;  // refused at the door: fine
  auto& conn = **connection;
  Segment recv{reinterpret_cast<std::uint64_t>((*buffer)->data()), 128, (*buffer)->lkey()};
  auto posted = conn.post_recv(recv);
  if (record->find('\n') != std::string::npos) {
    auto region = RemoteRegion::from_hex(record->substr(record->find('\n') + 1));
    attempt.found_descriptor = region.has_value();
    if (region) {
      std::memset(static_cast<char*>((*buffer)->data()) + 1024, 0xEE, 64);
      Segment junk{reinterpret_cast<std::uint64_t>((*buffer)->data()) + 1024, 64, (*buffer)->lkey()};
      auto id = conn.write(junk, region->at(0));
      auto done = id ? conn.wait(*id, 2s) : Result<Completion>(std::unexpected(id.error()));
      attempt.wrote = done && done->ok();
    }
  }
  if (posted) (void)conn.wait(*posted, 1s);  // rank 0's challenge, if it sends one
  // A made-up answer: the right shape, claiming rank 1, with a MAC that cannot be right.
  std::string fake(128, '\x5a');
  std::memcpy(fake.data(), "RKCH", 4);
  fake[4] = 2;
  std::uint32_t rank = 1, world = 2;
  std::memcpy(fake.data() + 8, &rank, 4);
  std::memcpy(fake.data() + 12, &world, 4);
  std::memcpy(static_cast<char*>((*buffer)->data()) + 2048, fake.data(), fake.size());
  Segment answer{reinterpret_cast<std::uint64_t>((*buffer)->data()) + 2048, 128, (*buffer)->lkey()};
  if (auto id = conn.send(answer); id) (void)conn.wait(*id, 1s);
  std::this_thread::sleep_for(200ms);  // let rank 0 judge the answer before rank 1 arrives
  return attempt;
}

class ScopedSecret {
 public:
  explicit ScopedSecret(const char* value) { setenv("RDMAKIT_JOB_SECRET", value, 1); }
  ~ScopedSecret() { unsetenv("RDMAKIT_JOB_SECRET"); }
};

TEST(CollStranger, CannotJoinAsARankNorWriteStagingMemory) {
  rdmakit::testing::expect_warning("refused a connection");
  ScopedSecret secret("a secret only the two ranks know");
  auto store = bootstrap::make_memory_store();
  std::promise<void> attempted;
  std::shared_future<void> release = attempted.get_future().share();
  CommOptions options{
      .network_transport = "tcp", .local_transport = "tcp", .timeout = 4000ms, .bootstrap_timeout = 6000ms};
  auto run_rank = [&](int rank, std::shared_ptr<bootstrap::Store> through) -> std::string {
    auto comm = Communicator::create(std::move(through), rank, 2, options);
    if (!comm) return "create: " + comm.error().describe();
    std::vector<float> data(256, static_cast<float>(rank + 1));
    if (auto ok = (*comm)->allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum);
        !ok)
      return "allreduce: " + ok.error().describe();
    for (float x : data)
      if (x != 3.0f)
        return "allreduce: wrong result " + std::to_string(x) + " (staging memory was tampered with?)";
    return "";
  };
  auto rank0 = std::async(std::launch::async, run_rank, 0, store);
  auto rank1 = std::async(std::launch::async, run_rank, 1, std::make_shared<HeldBackStore>(store, release));
  Attempt attempt = stranger(*store);
  attempted.set_value();
  std::string failed0 = rank0.get(), failed1 = rank1.get();
  EXPECT_FALSE(attempt.wrote) << "the stranger wrote into rank 0's staging memory";
  EXPECT_FALSE(attempt.found_descriptor) << "the store handed out a staging descriptor";
  EXPECT_EQ(failed0, "") << "rank 0";
  EXPECT_EQ(failed1, "") << "rank 1";
  EXPECT_EQ(rdmakit::testing::warnings_seen(), 1u) << "rank 0 did not notice and refuse the stranger";
}

// Without a job secret (the default on one host) the store and every connection's handshake prove the
// per-user secret, which a process of another uid cannot read. Run as uid 65534 (stranger.hpp), this part
// first asks the store at 127.0.0.1:$RDMAKIT_TEST_PORT for rank 0's listener, then, handed what the store
// holds (as if it had leaked), joins as rank 1 of 2 over an in-memory copy of it.
int join_as_stranger() {
  auto port = static_cast<std::uint16_t>(std::atoi(std::getenv("RDMAKIT_TEST_PORT")));
  auto client = bootstrap::TcpStore::open({.host = "127.0.0.1", .port = port, .timeout = 2000ms});
  auto read =
      client ? (*client)->get("coll/net/0", 1000ms) : Result<std::string>(std::unexpected(client.error()));
  std::printf("%s\n", read ? ("STORE_READ " + *read).c_str() : "STORE_REFUSED");
  auto leaked = bootstrap::make_memory_store();
  (void)leaked->set("coll/host/0", std::getenv("RDMAKIT_TEST_HOST0"));
  (void)leaked->set("coll/net/0", std::getenv("RDMAKIT_TEST_NET0"));
  CommOptions options{
      .network_transport = "tcp", .local_transport = "tcp", .timeout = 2000ms, .bootstrap_timeout = 3000ms};
  auto comm = Communicator::create(leaked, 1, 2, options);
  std::printf("%s\n", comm ? "JOINED" : ("JOIN_REFUSED " + comm.error().describe()).c_str());
  return 0;
}

const int kParts = rdmakit::testing::stranger::parts({{"join", join_as_stranger}});

TEST(CollStranger, WithoutAJobSecretAnotherUidNeitherReadsTheStoreNorJoins) {
  if (auto why = rdmakit::testing::stranger::unavailable(); !why.empty()) GTEST_SKIP() << why;
  rdmakit::testing::expect_warning("refused a connection");
  unsetenv("RDMAKIT_JOB_SECRET");
  auto server = bootstrap::TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
  ASSERT_TRUE(server) << server.error().describe();
  std::uint16_t port = (*server)->bound_port();
  auto rank1_store = bootstrap::TcpStore::open({.host = "127.0.0.1", .port = port, .timeout = 2000ms});
  ASSERT_TRUE(rank1_store) << rank1_store.error().describe();
  std::promise<void> attempted;
  std::shared_future<void> release = attempted.get_future().share();
  CommOptions options{
      .network_transport = "tcp", .local_transport = "tcp", .timeout = 4000ms, .bootstrap_timeout = 8000ms};
  auto run_rank = [&](int rank, std::shared_ptr<bootstrap::Store> through) -> std::string {
    auto comm = Communicator::create(std::move(through), rank, 2, options);
    if (!comm) return "create: " + comm.error().describe();
    std::vector<float> data(256, static_cast<float>(rank + 1));
    if (auto ok = (*comm)->allreduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum);
        !ok)
      return "allreduce: " + ok.error().describe();
    for (float x : data)
      if (x != 3.0f) return "allreduce: wrong result " + std::to_string(x);
    return "";
  };
  auto rank0 = std::async(std::launch::async, run_rank, 0, std::shared_ptr<bootstrap::Store>(*server));
  auto rank1 =
      std::async(std::launch::async, run_rank, 1, std::make_shared<HeldBackStore>(*rank1_store, release));
  auto host0 = (*server)->get("coll/host/0", 5s);
  auto net0 = (*server)->get("coll/net/0", 5s);
  ASSERT_TRUE(host0 && net0);
  auto outcome = rdmakit::testing::stranger::run("join", {{"RDMAKIT_TEST_PORT", std::to_string(port)},
                                                          {"RDMAKIT_TEST_HOST0", *host0},
                                                          {"RDMAKIT_TEST_NET0", *net0}});
  attempted.set_value();
  std::string failed0 = rank0.get(), failed1 = rank1.get();
  EXPECT_NE(outcome.output.find("STORE_REFUSED"), std::string::npos)
      << "uid 65534 read the store: " << outcome.output;
  EXPECT_NE(outcome.output.find("JOIN_REFUSED"), std::string::npos)
      << "uid 65534 joined as rank 1: " << outcome.output;
  EXPECT_EQ(failed0, "") << "rank 0";
  EXPECT_EQ(failed1, "") << "rank 1";
}

}  // namespace
}  // namespace rdmakit::coll::testing
