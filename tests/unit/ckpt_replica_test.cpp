// The peer-memory replica: an engine writes each checkpoint into the memory of an in-process
// `rdmakit-ckpt serve` (ReplicaServer) over the tcp transport; a new engine restores from that memory
// after the disk was lost; the server keeps the newest complete replica per rank within its budget,
// drops replicas that do not verify, persists with --persist; the wire messages are checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "ckpt/checksum.hpp"
#include "ckpt/io.hpp"
#include "ckpt/manifest.hpp"
#include "ckpt/persist.hpp"
#include "ckpt/replica.hpp"
#include "ckpt_support.hpp"
#include "rdmakit/ckpt/serve.hpp"
#include "rdmakit/ckpt/store.hpp"

namespace rdmakit::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::PatternState;
using testing::TempDir;

// Over RDMAKIT_TRANSPORT when set (the engine's side uses it too), else tcp.
std::unique_ptr<ReplicaServer> serve(std::uint64_t budget, std::string persist = {}) {
  auto server = ReplicaServer::create(ServeOptions{.transport = std::getenv("RDMAKIT_TRANSPORT") ? "" : "tcp",
                                                   .budget_bytes = budget,
                                                   .persist_directory = std::move(persist)});
  EXPECT_TRUE(server) << server.error().describe();
  return server ? std::move(*server) : nullptr;
}

EngineOptions replica_options(const std::string& dir, const ReplicaServer& server) {
  auto options = testing::test_options(dir);
  options.replica = server.address();
  return options;
}

TEST(CkptReplica, RestoresFromPeerMemoryAfterTheDiskIsLost) {
  TempDir dir;
  auto server = serve(64 << 20);
  ASSERT_TRUE(server);
  PatternState state;
  {
    auto engine = Engine::create(replica_options(dir.path() + "/a", *server), state.buffers());
    ASSERT_TRUE(engine) << engine.error().describe();
    for (std::uint64_t step = 1; step <= 3; ++step) {
      state.fill(step);
      ASSERT_TRUE((*engine)->snapshot(step));
      auto report = (*engine)->wait_persisted();
      ASSERT_TRUE(report) << report.error().describe();
      EXPECT_TRUE(report->replicated);
    }
  }
  ASSERT_EQ(server->newest(0).value_or(ReplicaInfo{}).step, 3u);
  fs::remove_all(dir.path() + "/a");  // the process's disk is gone; the peer is not
  state.fill(0);
  auto engine = Engine::create(replica_options(dir.path() + "/a", *server), state.buffers());
  ASSERT_TRUE(engine);
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 3u);
  EXPECT_TRUE(state.matches(3));
  // Newer on disk than in memory: the disk wins (a replica is never taken over a newer checkpoint).
  PatternState other;
  {
    auto options = testing::test_options(dir.path() + "/a");
    auto plain = Engine::create(options, other.buffers());
    ASSERT_TRUE(plain);
    other.fill(4);
    ASSERT_TRUE((*plain)->snapshot(4));
    ASSERT_TRUE((*plain)->wait_persisted());
  }
  state.fill(0);
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 4u);
  EXPECT_TRUE(state.matches(4));
}

TEST(CkptReplica, BudgetRefusedClearly) {
  TempDir dir;
  auto server = serve(1 << 20);  // smaller than two slots of 1.6 MiB
  ASSERT_TRUE(server);
  PatternState state;
  ::rdmakit::testing::expect_warning("over the budget");  // the sizes are logged by the server only
  auto engine = Engine::create(replica_options(dir.path(), *server), state.buffers());
  ASSERT_FALSE(engine);
  EXPECT_NE(engine.error().message().find("over the budget"), std::string::npos) << engine.error().message();
  EXPECT_EQ(engine.error().message().find_first_of("0123456789", engine.error().message().find("refused")),
            std::string::npos)
      << "the refusal tells the peer sizes: " << engine.error().message();
  EXPECT_EQ(server->used_bytes(), 0u);
}

// A client whose data does not match its manifest. The server accepts the commit (it does not read the
// bytes while pushes may be under way), finds the mismatch when it verifies, drops that replica and keeps
// the one before as the newest; the client's fetch returns that one. With --persist the server verifies
// before it writes to disk, so the commit itself is refused.
void push_one_that_does_not_verify(ReplicaServer& server, bool refused_at_commit) {
  std::uint64_t bytes = 3 * 4096 + 100;
  auto staging = detail::AlignedBuffer::allocate(detail::round_up(bytes, 4096));
  ASSERT_TRUE(staging);
  auto client =
      detail::ReplicaClient::connect(server.address(), 0, 1, staging->data(), staging->size(), bytes);
  ASSERT_TRUE(client) << client.error().describe();
  auto manifest_of = [&](std::uint64_t step) {
    Manifest m{.step = step, .chunk_bytes = 4096, .files = {FileEntry{detail::data_file_name(0), bytes}}};
    for (std::uint64_t off = 0; off < bytes; off += 4096) {
      auto size = std::min<std::uint64_t>(4096, bytes - off);
      m.chunks.push_back(ChunkEntry{0, off, size, checksum64(staging->data() + off, size)});
    }
    return m;
  };
  testing::fill_seeded(staging->data(), bytes, 1);
  ASSERT_TRUE(client->push(manifest_of(1)));
  auto bad = manifest_of(2);
  bad.chunks[1].checksum ^= 1;
  ::rdmakit::testing::expect_warning(refused_at_commit ? "refused" : "does not verify");
  auto pushed = client->push(bad);
  if (refused_at_commit) {
    ASSERT_FALSE(pushed);
    EXPECT_NE(pushed.error().message().find("checksum mismatch in chunk 1"), std::string::npos)
        << pushed.error().message();
  } else {
    ASSERT_TRUE(pushed) << pushed.error().describe();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.newest(0).value_or(ReplicaInfo{}).step != 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server.newest(0).value_or(ReplicaInfo{}).step, 1u) << "the replica that does not verify stayed";
  auto steps = client->held_steps();
  ASSERT_TRUE(steps) << steps.error().describe();
  EXPECT_EQ(*steps, std::vector<std::uint64_t>{1});
  std::fill(staging->data(), staging->data() + bytes, 0);
  auto fetched = client->fetch();
  ASSERT_TRUE(fetched) << fetched.error().describe();
  EXPECT_EQ(fetched->step, 1u);
  EXPECT_EQ(testing::seeded_mismatch(staging->data(), bytes, 1), bytes);
}

TEST(CkptReplica, ServerDropsAReplicaThatDoesNotVerify) {
  auto server = serve(64 << 20);
  ASSERT_TRUE(server);
  push_one_that_does_not_verify(*server, false);
}

TEST(CkptReplica, PersistingServerRefusesAReplicaThatDoesNotVerify) {
  TempDir dir;
  auto server = serve(64 << 20, dir.path() + "/peer");
  ASSERT_TRUE(server);
  push_one_that_does_not_verify(*server, true);
}

TEST(CkptReplica, PersistDirectoryGetsEveryReplica) {
  TempDir dir;
  auto server = serve(64 << 20, dir.path() + "/peer");
  ASSERT_TRUE(server);
  PatternState state;
  auto engine = Engine::create(replica_options(dir.path() + "/local", *server), state.buffers());
  ASSERT_TRUE(engine);
  state.fill(5);
  ASSERT_TRUE((*engine)->snapshot(5));
  ASSERT_TRUE((*engine)->wait_persisted());
  auto list = list_checkpoints(dir.path() + "/peer/rank-00000");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE(verify_checkpoint(list->front().path)) << list->front().path;
  // An engine restores from the peer's disk as from its own.
  PatternState copy;
  auto reader = Engine::create(testing::test_options(dir.path() + "/peer/rank-00000"), copy.buffers());
  ASSERT_TRUE(reader);
  ASSERT_EQ((*reader)->restore_latest().value_or(0), 5u);
  EXPECT_TRUE(copy.matches(5));
}

// The peer goes away: the checkpoint still commits on disk, and the replica's failure surfaces, with its
// cause, at the next call.
TEST(CkptReplica, LostPeerSurfacesAtTheNextCall) {
  TempDir dir;
  auto server = serve(64 << 20);
  ASSERT_TRUE(server);
  PatternState state;
  auto engine = Engine::create(replica_options(dir.path(), *server), state.buffers());
  ASSERT_TRUE(engine);
  server.reset();
  ::rdmakit::testing::expect_warning("replica");
  state.fill(6);
  ASSERT_TRUE((*engine)->snapshot(6));
  auto failed = (*engine)->wait_persisted();
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message().find("replica of step 6 failed"), std::string::npos)
      << failed.error().message();
  EXPECT_TRUE(verify_checkpoint(dir.path() + "/" + detail::checkpoint_name(6)));
  state.fill(0);
  ASSERT_EQ((*engine)->restore_latest().value_or(0), 6u);  // from disk: the peer is gone
  EXPECT_TRUE(state.matches(6));
}

TEST(CkptReplica, MessagesAreChecked) {
  detail::Message m{.type = detail::MessageType::Commit, .rank = 3, .step = 9, .slot = 1, .text = "hi"};
  auto bytes = detail::encode_message(m);
  auto decoded = detail::decode_message(bytes.data(), bytes.size());
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->rank, 3u);
  EXPECT_EQ(decoded->text, "hi");
  EXPECT_FALSE(detail::decode_message(bytes.data(), bytes.size() - 1));
  auto bad = bytes;
  bad[0] = std::byte{0};
  EXPECT_FALSE(detail::decode_message(bad.data(), bad.size()));  // magic
  bad = bytes;
  bad[4] = std::byte{1};  // the version before the one message channel
  auto old = detail::decode_message(bad.data(), bad.size());
  ASSERT_FALSE(old);
  EXPECT_EQ(old.error().code(), Errc::NotSupported) << old.error().describe();
  bad = bytes;
  bad[5] = std::byte{99};
  EXPECT_FALSE(detail::decode_message(bad.data(), bad.size()));  // type
  bad = bytes;
  bad.resize(8 + 39);  // fields cut short, with a header that says so
  bad[6] = std::byte{39};
  EXPECT_FALSE(detail::decode_message(bad.data(), bad.size()));
  // The longest text fits; a frame past the protocol's bound is refused whatever its header says.
  m.text.assign(detail::kMessageText - 1, 'x');
  auto longest = detail::encode_message(m);
  ASSERT_TRUE(detail::decode_message(longest.data(), longest.size()));
  longest.push_back(std::byte{'x'});
  longest[6] = static_cast<std::byte>(static_cast<std::uint8_t>(longest[6]) + 1);
  EXPECT_FALSE(detail::decode_message(longest.data(), longest.size()));
}

}  // namespace
}  // namespace rdmakit::ckpt
