// The transfer engine's trust model (docs/xfer.md, "Trust"): records sealed with the job's secret and
// refused (never cached) when they do not verify, listeners that keep a connection only once its peer
// proved the secret, and a reader that checks the peer it reaches is the owner the record names. The
// strangers here hold another secret (a process without the job secret); the cross-uid cases are in
// tests/xfer/metadata (a process of another uid cannot even reach the builtin store).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bootstrap/peer_proof.hpp"
#include "rdmakit/context.hpp"
#include "support/test_support.hpp"
#include "xfer/engine/record.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;
using rdmakit::testing::fill_pattern;
using rdmakit::testing::find_pattern_mismatch;

constexpr std::size_t kSize = 1 << 20;
constexpr const char* kJob = "the job's secret, 16+ characters";
constexpr const char* kStranger = "a stranger's secret, 16+ chars";

// An engine that holds `secret` (engines read RDMAKIT_JOB_SECRET once, when created).
std::unique_ptr<Engine> engine_with(MetadataStore& store, const char* secret, const std::string& name) {
  ::setenv("RDMAKIT_JOB_SECRET", secret, 1);
  auto engine = make_engine(store, EngineOptions{.name = name, .transports = {"tcp"}});
  ::unsetenv("RDMAKIT_JOB_SECRET");
  return engine;
}

detail::SegmentRecord sample_record() {
  detail::SegmentRecord record{"owner", "host", 4096, {}};
  RemoteRegion region{};
  region.addr = 0x1000;
  region.length = 4096;
  region.rkey = 7;
  region.owner_epoch = 9;
  record.rails.push_back({"tcp", "127.0.0.1:1", region});
  return record;
}

TEST(XferTrust, SealedRecordOpensOnlyWithItsSecretAndName) {
  auto record = sample_record();
  auto sealed = detail::seal(record, "kv", kJob);
  ASSERT_TRUE(sealed.has_value()) << sealed.error().describe();
  auto opened = detail::open_sealed(*sealed, "kv", kJob);
  ASSERT_TRUE(opened.has_value()) << opened.error().describe();
  EXPECT_EQ(*opened, record);
  // Another secret, another name, one flipped bit anywhere, the plain body: all refused.
  EXPECT_EQ(detail::open_sealed(*sealed, "kv", kStranger).error().code(), Errc::ConnectionRefused);
  EXPECT_EQ(detail::open_sealed(*sealed, "kv2", kJob).error().code(), Errc::ConnectionRefused);
  for (std::size_t i = 4; i < sealed->size(); ++i) {
    auto altered = *sealed;
    altered[i] ^= std::byte{1};
    ASSERT_FALSE(detail::open_sealed(altered, "kv", kJob).has_value()) << "byte " << i;
  }
  EXPECT_EQ(detail::open_sealed(detail::encode(record), "kv", kJob).error().code(), Errc::ProtocolError);
  EXPECT_FALSE(detail::open_sealed(std::span(*sealed).first(20), "kv", kJob).has_value());
  // The descriptor does not appear in clear: a reader of the store learns no rkey or address.
  auto region = record.rails[0].region.serialize();
  EXPECT_EQ(std::search(sealed->begin(), sealed->end(), region.begin(), region.end()), sealed->end());
}

// A stranger publishes a record under a name nobody holds, and a decoy carrying the owner's engine name:
// the client refuses both (never connects, never caches), and its WRITE lands only in the real owner.
TEST(XferTrust, ForgedAndDecoyRecordsAreRefusedAndNeverCached) {
  TempDir dir;
  FileMetadataStore owner_store(dir.path()), stranger_store(dir.path()), client_store(dir.path());
  auto owner = engine_with(owner_store, kJob, "owner");
  auto stranger = engine_with(stranger_store, kStranger, "owner");  // the owner's name
  auto client = engine_with(client_store, kJob, "client");
  ASSERT_TRUE(owner && stranger && client);
  auto real = owner->allocate_segment("owner/kv", kSize);
  auto decoy = stranger->allocate_segment("decoy", kSize);
  ASSERT_TRUE(real.has_value() && decoy.has_value());
  std::memset(real->data(), 0, kSize);
  std::memset(decoy->data(), 0, kSize);
  // The decoy's bytes again under a name of the stranger's choosing, and an unsealed (old format) record.
  auto decoy_bytes = stranger_store.lookup(detail::segment_key("decoy"));
  ASSERT_TRUE(decoy_bytes.has_value() && decoy_bytes->has_value());
  ASSERT_TRUE(stranger_store.publish(detail::segment_key("victim/kv"), **decoy_bytes).has_value());
  auto real_bytes = owner_store.lookup(detail::segment_key("owner/kv"));
  auto plain = detail::open_sealed(**real_bytes, "owner/kv", kJob);
  ASSERT_TRUE(plain.has_value());
  ASSERT_TRUE(stranger_store.publish(detail::segment_key("plain"), detail::encode(*plain)).has_value());

  for (const char* name : {"decoy", "victim/kv", "decoy"}) {
    auto resolves = client->stats().resolves;
    auto handle = client->open_segment(name);
    ASSERT_FALSE(handle.has_value()) << name;
    EXPECT_EQ(handle.error().code(), Errc::ConnectionRefused) << handle.error().describe();
    EXPECT_NE(handle.error().message().find("does not verify"), std::string::npos)
        << handle.error().message();
    EXPECT_EQ(client->stats().resolves, resolves + 1) << name << ": a refused record must not be cached";
  }
  auto unsealed = client->open_segment("plain");
  ASSERT_FALSE(unsealed.has_value());
  EXPECT_EQ(unsealed.error().code(), Errc::ProtocolError) << unsealed.error().describe();

  auto local = make_buffer(kSize);
  fill_pattern(local.get(), kSize, 3);
  ASSERT_TRUE(client->register_local(local.get(), kSize).has_value());
  auto kv = client->open_segment("owner/kv");
  ASSERT_TRUE(kv.has_value()) << kv.error().describe();
  auto batch = client->submit(std::vector{Request{Op::Write, local.get(), *kv, 0, kSize}});
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  ASSERT_TRUE((*batch)->wait(10s).has_value());
  ASSERT_TRUE((*batch)->status(0)->has_value()) << (*batch)->status(0)->error().describe();
  EXPECT_EQ(find_pattern_mismatch(real->data(), kSize, 3), kSize);
  for (std::size_t i = 0; i < kSize; ++i)
    ASSERT_EQ(decoy->data()[i], std::byte{0}) << "stranger got byte " << i;
}

// A record (sealed by a job member) names owner "a", but the engine listening at its address is "b": the
// identity the peer proves must be the record's owner, whatever epoch or address the record claims.
TEST(XferTrust, PeerMustProveItIsTheRecordsOwner) {
  TempDir dir;
  FileMetadataStore b_store(dir.path()), client_store(dir.path());
  auto b = engine_with(b_store, kJob, "b");
  auto client = engine_with(client_store, kJob, "client");
  ASSERT_TRUE(b && client);
  auto segment = b->allocate_segment("b/kv", kSize);
  ASSERT_TRUE(segment.has_value());
  auto bytes = b_store.lookup(detail::segment_key("b/kv"));
  auto record = detail::open_sealed(**bytes, "b/kv", kJob);
  ASSERT_TRUE(record.has_value());
  record->owner = "a";
  auto forged = detail::seal(*record, "a/kv", kJob);
  ASSERT_TRUE(b_store.publish(detail::segment_key("a/kv"), *forged).has_value());
  auto handle = client->open_segment("a/kv");
  ASSERT_FALSE(handle.has_value());
  EXPECT_EQ(handle.error().code(), Errc::ConnectionRefused) << handle.error().describe();
  EXPECT_NE(handle.error().message().find("proved the secret as 'b'"), std::string::npos)
      << handle.error().message();
  EXPECT_TRUE(client->open_segment("b/kv").has_value());  // the honest record still works
}

// The owner's listener keeps no connection whose peer did not prove the secret: a stranger that proves
// another secret is refused, and one that stays silent is dropped after connect_timeout, so that even
// holding the descriptor (which the sealed record does not give it: the test hands it over) it reads and
// writes nothing afterwards.
TEST(XferTrust, ListenerDropsAPeerWithoutTheSecret) {
  TempDir dir;
  FileMetadataStore owner_store(dir.path());
  ::setenv("RDMAKIT_JOB_SECRET", kJob, 1);
  auto owner = make_engine(owner_store,
                           EngineOptions{.name = "owner", .transports = {"tcp"}, .connect_timeout = 300ms});
  ::unsetenv("RDMAKIT_JOB_SECRET");
  ASSERT_TRUE(owner);
  auto segment = owner->allocate_segment("kv", kSize);
  ASSERT_TRUE(segment.has_value());
  fill_pattern(segment->data(), kSize, 11);
  auto bytes = owner_store.lookup(detail::segment_key("kv"));
  auto record = detail::open_sealed(**bytes, "kv", kJob);
  ASSERT_TRUE(record.has_value());
  const auto& rail = record->rails.front();

  auto context = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(context.has_value()) << context.error().describe();
  auto wrong = (*context)->connect(rail.address);
  ASSERT_TRUE(wrong.has_value()) << wrong.error().describe();
  bootstrap::PeerProofConfig config{kStranger, std::string(detail::kPeerProofLabel), 5000ms};
  auto proof = bootstrap::prove_initiate(**context, **wrong, config, "stranger");
  ASSERT_FALSE(proof.has_value());
  EXPECT_EQ(proof.error().code(), Errc::ConnectionRefused) << proof.error().describe();

  auto buffer = (*context)->allocate(kSize, Access::LocalWrite);
  ASSERT_TRUE(buffer.has_value());
  std::memset((*buffer)->data(), 0, kSize);
  Segment local{reinterpret_cast<std::uint64_t>((*buffer)->data()), kSize, (*buffer)->lkey()};
  auto silent = (*context)->connect(rail.address);
  ASSERT_TRUE(silent.has_value()) << silent.error().describe();
  // The owner's proof runs out after its connect_timeout (300 ms) and it closes the connection.
  for (auto deadline = std::chrono::steady_clock::now() + 5s;
       (*silent)->health().has_value() && std::chrono::steady_clock::now() < deadline;)
    std::this_thread::sleep_for(20ms);
  EXPECT_FALSE((*silent)->health().has_value()) << "the owner kept a connection that proved nothing";
  auto read = (*silent)->read(local, rail.region.at(0));
  if (read) {
    auto done = (*silent)->wait(*read, 5s);
    EXPECT_TRUE(!done || !done->ok()) << "a READ without the secret completed";
  }
  auto write = (*silent)->write(Segment{local.addr, 4096, local.lkey}, rail.region.at(0));
  if (write) (void)(*silent)->wait(*write, 5s);
  auto* got = static_cast<const std::byte*>((*buffer)->data());
  EXPECT_EQ(std::count(got, got + kSize, std::byte{0}), static_cast<std::ptrdiff_t>(kSize))
      << "the stranger read the segment";
  EXPECT_EQ(find_pattern_mismatch(segment->data(), kSize, 11), kSize) << "the stranger wrote the segment";
}

// Notifications are taken only from connections whose peer proved the secret: the owner opens their channel
// after the proof verified. A stranger that connects and SENDs at once (inside the proof window) or after a
// failed proof gets nothing queued, counted or refused: its bytes never reach the notification channel.
TEST(XferTrust, OnlyPeersThatProvedTheSecretCanNotify) {
  TempDir dir;
  FileMetadataStore owner_store(dir.path());
  ::setenv("RDMAKIT_JOB_SECRET", kJob, 1);
  auto owner = make_engine(owner_store,
                           EngineOptions{.name = "owner", .transports = {"tcp"}, .connect_timeout = 300ms});
  ::unsetenv("RDMAKIT_JOB_SECRET");
  ASSERT_TRUE(owner);
  ASSERT_TRUE(owner->allocate_segment("kv", kSize).has_value());
  auto record = detail::open_sealed(**owner_store.lookup(detail::segment_key("kv")), "kv", kJob);
  ASSERT_TRUE(record.has_value());
  const auto& address = record->rails.front().address;

  auto context = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(context.has_value()) << context.error().describe();
  auto buffer = (*context)->allocate(4096, Access::LocalWrite);
  ASSERT_TRUE(buffer.has_value());
  // Bytes shaped like a notification about "kv" (a u16 length, the name, a message), whatever the framing.
  std::memset((*buffer)->data(), 0, 4096);
  auto* bytes = static_cast<char*>((*buffer)->data());
  bytes[8] = 2, bytes[10] = 'k', bytes[11] = 'v';
  Segment message{reinterpret_cast<std::uint64_t>(bytes), 64, (*buffer)->lkey()};
  auto eager = (*context)->connect(address);
  ASSERT_TRUE(eager.has_value()) << eager.error().describe();
  for (int i = 0; i < 4; ++i) (void)(*eager)->send(message);
  auto refused = (*context)->connect(address);
  ASSERT_TRUE(refused.has_value()) << refused.error().describe();
  bootstrap::PeerProofConfig config{kStranger, std::string(detail::kPeerProofLabel), 5000ms};
  ASSERT_FALSE(bootstrap::prove_initiate(**context, **refused, config, "stranger").has_value());
  for (int i = 0; i < 4; ++i) (void)(*refused)->send(message);
  std::this_thread::sleep_for(500ms);  // past the owner's connect_timeout: both connections are dropped
  EXPECT_FALSE(owner->poll_notification().has_value()) << "a stranger's bytes were queued as a notification";
  auto stats = owner->stats();
  EXPECT_EQ(stats.notifications_received + stats.notifications_refused + stats.notifications_dropped, 0u)
      << "a stranger's bytes reached the notification channel";
}

}  // namespace
}  // namespace rdmakit::xfer::testing
