// A stranger who learnt what the store holds (rank 0's listener and whatever rank 0 published there)
// tries to join a communicator as rank 1 before the real rank 1 does: it must neither write into rank 0's
// staging memory nor take rank 1's place, and the real ranks must still run their collectives.
// The ranks are threads over an in-memory store (the store leaked, in the worst case), with a job secret
// from the environment as a launch would set it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>

#include "coll_harness.hpp"
#include "rdmakit/context.hpp"
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

}  // namespace
}  // namespace rdmakit::coll::testing
