// The shared trust blocks: the per-user secret file (auth::user_secret), the private directory it and the
// shm sockets fall back to (private_dir), auth::service_secret's choice of key, and the peer proof over an
// rdmakit connection (prove_initiate / prove_accept), including against a process of another uid.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/peer_proof.hpp"
#include "core/private_dir.hpp"
#include "rdmakit/context.hpp"
#include "stranger.hpp"
#include "support/test_support.hpp"

namespace rdmakit::bootstrap {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace stranger = rdmakit::testing::stranger;

constexpr std::string_view kLabel = "rdmakit-test-proof/v1";

// Sets (or, with nullopt, removes) environment variables for one test and restores them after.
class ScopedEnv {
 public:
  using Vars = std::map<std::string, std::optional<std::string>>;
  explicit ScopedEnv(const Vars& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_)
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/rdmakit-proof-test-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// ---- parts run in a child process (stranger.hpp) -----------------------------------------------------

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {digits[c >> 4], digits[c & 15]};
  return out;
}

// Reads the user secret in $RDMAKIT_TEST_DIR once the monotonic clock reaches $RDMAKIT_TEST_START_NS,
// so that two processes make their first use at the same moment.
int read_secret_at_start() {
  long long start = std::atoll(std::getenv("RDMAKIT_TEST_START_NS"));
  for (;;) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec * 1000000000LL + now.tv_nsec >= start) break;
  }
  auto secret = auth::user_secret_in(std::getenv("RDMAKIT_TEST_DIR"));
  if (!secret) return std::printf("ERROR %s\n", secret.error().describe().c_str()), 1;
  std::printf("SECRET %s\n", hex(*secret).c_str());
  return 0;
}

// Connects to $RDMAKIT_TEST_ADDRESS and proves the key this process has for loopback (its user secret).
int prove_over_loopback() {
  auto secret = auth::service_secret("127.0.0.1", "the test acceptor");
  if (!secret) return std::printf("ERROR %s\n", secret.error().describe().c_str()), 1;
  auto context = Context::open(Options{.transport = "tcp"});
  if (!context) return std::printf("ERROR %s\n", context.error().describe().c_str()), 1;
  auto connection = (*context)->connect(std::getenv("RDMAKIT_TEST_ADDRESS"));
  if (!connection) return std::printf("REFUSED connect: %s\n", connection.error().describe().c_str()), 0;
  auto proven = prove_initiate(
      **context, **connection,
      PeerProofConfig{.secret = *secret, .label = std::string(kLabel), .timeout = 5s}, "the child");
  if (proven)
    std::printf("PROVEN %s\n", proven->c_str());
  else
    std::printf("REFUSED %s\n", proven.error().describe().c_str());
  return 0;
}

const int kParts = stranger::parts({{"read-secret", read_secret_at_start}, {"prove", prove_over_loopback}});

// ---- the user secret ---------------------------------------------------------------------------------

TEST(UserSecret, IsA0600FileInA0700DirectoryAndStable) {
  TempDir tmp;
  std::string dir = tmp.path() + "/secret";
  auto first = auth::user_secret_in(dir);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_EQ(first->size(), 32u);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(dir + "/user-secret"), 0600u);
  auto again = auth::user_secret_in(dir);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *first);
  TempDir other;
  auto elsewhere = auth::user_secret_in(other.path() + "/secret");
  ASSERT_TRUE(elsewhere);
  EXPECT_NE(*elsewhere, *first) << "two secret files hold the same bytes: not random";
}

TEST(UserSecret, RefusesAFileOrDirectoryOthersCanReach) {
  TempDir tmp;
  std::string dir = tmp.path() + "/secret";
  ASSERT_TRUE(auth::user_secret_in(dir));
  for (mode_t mode : {0640, 0604, 0620}) {
    ASSERT_EQ(::chmod((dir + "/user-secret").c_str(), mode), 0);
    auto refused = auth::user_secret_in(dir);
    ASSERT_FALSE(refused) << "a secret file of mode " << std::oct << mode << " was used";
    EXPECT_NE(refused.error().message().find(dir + "/user-secret"), std::string::npos)
        << refused.error().message();
  }
  ASSERT_EQ(::chmod((dir + "/user-secret").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0750), 0);
  auto open_dir = auth::user_secret_in(dir);
  ASSERT_FALSE(open_dir) << "a secret in a directory of mode 0750 was used";
  EXPECT_NE(open_dir.error().message().find(dir), std::string::npos) << open_dir.error().message();
}

TEST(UserSecret, RefusesAFileOrDirectoryOfAnotherUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to uid 65534 needs root";
  TempDir tmp;
  std::string dir = tmp.path() + "/secret";
  ASSERT_TRUE(auth::user_secret_in(dir));
  ASSERT_EQ(::chown((dir + "/user-secret").c_str(), 65534, 65534), 0);
  auto file = auth::user_secret_in(dir);
  ASSERT_FALSE(file) << "a secret file owned by uid 65534 was used";
  EXPECT_NE(file.error().message().find("not a regular file of ours"), std::string::npos)
      << file.error().message();
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  auto directory = auth::user_secret_in(dir);
  ASSERT_FALSE(directory) << "a secret directory owned by uid 65534 was used";
}

TEST(UserSecret, TwoProcessesUsingItFirstAtOnceGetOneSecret) {
  for (int round = 0; round < 5; ++round) {
    TempDir tmp;
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    std::string start = std::to_string(now.tv_sec * 1000000000LL + now.tv_nsec + 300'000'000LL);
    std::map<std::string, std::string> env{{"RDMAKIT_TEST_DIR", tmp.path() + "/secret"},
                                           {"RDMAKIT_TEST_START_NS", start}};
    auto a = std::async(std::launch::async, [&] { return stranger::run("read-secret", env, false); });
    auto b = std::async(std::launch::async, [&] { return stranger::run("read-secret", env, false); });
    auto first = a.get(), second = b.get();
    ASSERT_EQ(first.status, 0) << first.output;
    ASSERT_EQ(second.status, 0) << second.output;
    EXPECT_TRUE(first.output.starts_with("SECRET ")) << first.output;
    EXPECT_EQ(first.output, second.output) << "round " << round << ": two processes made two secrets";
  }
}

TEST(UserSecret, ThreadsUsingItFirstAtOnceGetOneSecret) {
  for (int round = 0; round < 10; ++round) {  // ranks as threads on a machine that has no secret yet
    TempDir tmp;
    std::string dir = tmp.path() + "/secret";
    std::vector<std::future<Result<std::string>>> threads;
    for (int i = 0; i < 4; ++i)
      threads.push_back(std::async(std::launch::async, [&] { return auth::user_secret_in(dir); }));
    std::optional<std::string> first;
    for (auto& t : threads) {
      auto secret = t.get();
      ASSERT_TRUE(secret) << "round " << round << ": " << secret.error().describe();
      if (!first) first = *secret;
      EXPECT_EQ(*secret, *first) << "round " << round << ": two threads made two secrets";
    }
  }
}

// ---- the private directory in /tmp -------------------------------------------------------------------

TEST(PrivateDir, FallsBackToAPrivateDirectoryWhenTheNameIsTaken) {
  TempDir tmp;
  ScopedEnv env({{"TMPDIR", tmp.path()}});
  std::string usual = tmp.path() + "/rdmakit-" + std::to_string(::geteuid());
  auto plain = private_dir::in_tmp();
  ASSERT_TRUE(plain) << plain.error().describe();
  EXPECT_EQ(*plain, usual);
  EXPECT_EQ(mode_of(usual), 0700u);
  // Someone made it open to others (as root we may also hand it to another uid, as a stranger would have
  // made it): refused, and a fallback of ours used instead, the same one every time.
  rdmakit::testing::expect_warning("not a private directory");
  ASSERT_EQ(::chmod(usual.c_str(), 0777), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(usual.c_str(), 65534, 65534), 0);
  }
  auto fallback = private_dir::in_tmp();
  ASSERT_TRUE(fallback) << fallback.error().describe();
  EXPECT_TRUE(fallback->starts_with(usual + "-")) << *fallback;
  EXPECT_EQ(mode_of(*fallback), 0700u);
  struct stat st {};
  ASSERT_EQ(::lstat(fallback->c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid());
  auto again = private_dir::in_tmp();
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *fallback) << "processes of one uid would not agree on the fallback";
  // A fallback-like name someone else made open is never taken.
  ASSERT_EQ(::chmod(fallback->c_str(), 0755), 0);
  auto fresh = private_dir::in_tmp();
  ASSERT_TRUE(fresh);
  EXPECT_NE(*fresh, *fallback);
  EXPECT_EQ(mode_of(*fresh), 0700u);
}

// ---- service_secret ----------------------------------------------------------------------------------

TEST(ServiceSecret, BeyondLoopbackWithoutAJobSecretNamesJobSecretAndInsecure) {
  ScopedEnv env({{"RDMAKIT_JOB_SECRET", std::nullopt}, {"RDMAKIT_INSECURE", std::nullopt}});
  auto refused = auth::service_secret("10.1.2.3", "the test service");
  ASSERT_FALSE(refused) << "a non-loopback service without a job secret was allowed";
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
  EXPECT_NE(refused.error().message().find("job_secret"), std::string::npos) << refused.error().message();
  EXPECT_NE(refused.error().message().find("insecure"), std::string::npos) << refused.error().message();
  auto loopback = auth::service_secret("127.0.0.1", "the test service");
  ASSERT_TRUE(loopback) << loopback.error().describe();
  EXPECT_EQ(loopback->size(), 32u) << "loopback without a job secret uses the per-user secret";
}

TEST(ServiceSecret, InsecureAllowsItWithAWarningAndAJobSecretWins) {
  {
    ScopedEnv env({{"RDMAKIT_JOB_SECRET", std::nullopt}, {"RDMAKIT_INSECURE", "1"}});
    rdmakit::testing::expect_warning("UNAUTHENTICATED");
    auto allowed = auth::service_secret("10.1.2.3", "the test service");
    ASSERT_TRUE(allowed) << allowed.error().describe();
    EXPECT_EQ(*allowed, "");
    EXPECT_EQ(rdmakit::testing::warnings_seen(), 1u);
  }
  ScopedEnv env({{"RDMAKIT_JOB_SECRET", "a job secret of some length"}, {"RDMAKIT_INSECURE", std::nullopt}});
  EXPECT_EQ(auth::service_secret("10.1.2.3", "x").value_or("?"), "a job secret of some length");
  EXPECT_EQ(auth::service_secret("127.0.0.1", "x").value_or("?"), "a job secret of some length");
}

// ---- the peer proof ----------------------------------------------------------------------------------

struct Pair {
  std::shared_ptr<Context> acceptor = Context::open(Options{.transport = "tcp"}).value();
  std::shared_ptr<Context> initiator = Context::open(Options{.transport = "tcp"}).value();
  std::shared_ptr<Listener> listener = acceptor->listen().value();
};

PeerProofConfig config(std::string secret) {
  return PeerProofConfig{.secret = std::move(secret), .label = std::string(kLabel), .timeout = 5s};
}

TEST(PeerProof, ASharedSecretProvesBothIdentities) {
  Pair pair;
  auto accepted = std::async(std::launch::async, [&]() -> Result<std::string> {
    auto c = pair.listener->accept(5s);
    if (!c) return std::unexpected(c.error());
    return prove_accept(*pair.acceptor, **c, config("the one shared secret"), "acceptor-id");
  });
  auto connection = pair.initiator->connect(pair.listener->address()).value();
  auto proven = prove_initiate(*pair.initiator, *connection, config("the one shared secret"), "initiator-id");
  ASSERT_TRUE(proven) << proven.error().describe();
  EXPECT_EQ(*proven, "acceptor-id");
  auto other = accepted.get();
  ASSERT_TRUE(other) << other.error().describe();
  EXPECT_EQ(*other, "initiator-id");
}

TEST(PeerProof, AWrongSecretIsRefusedOnBothSides) {
  Pair pair;
  auto accepted = std::async(std::launch::async, [&]() -> Result<std::string> {
    auto c = pair.listener->accept(5s);
    if (!c) return std::unexpected(c.error());
    return prove_accept(*pair.acceptor, **c, config("the acceptor's secret"), "acceptor-id");
  });
  auto connection = pair.initiator->connect(pair.listener->address()).value();
  auto proven = prove_initiate(*pair.initiator, *connection, config("another secret"), "initiator-id");
  ASSERT_FALSE(proven) << "the initiator accepted " << *proven;
  EXPECT_EQ(proven.error().code(), Errc::ConnectionRefused);
  auto other = accepted.get();
  ASSERT_FALSE(other) << "the acceptor accepted " << *other;
  EXPECT_EQ(other.error().code(), Errc::ConnectionRefused);
}

// A hand-made initiator: it reads everything the acceptor sends and answers with a proof whose MAC is wrong.
// The frame (core/message_channel.hpp): magic "RKPP", version, type, payload length, then the payload.
TEST(PeerProof, TheAcceptorSendsNothingButANonceBeforeAValidProof) {
  constexpr std::size_t kMessage = 256;  // larger than any proof frame
  Pair pair;
  auto accepted = std::async(std::launch::async, [&]() -> Result<std::string> {
    auto c = pair.listener->accept(5s);
    if (!c) return std::unexpected(c.error());
    return prove_accept(*pair.acceptor, **c, config("the acceptor's secret"), "acceptor-id");
  });
  auto connection = pair.initiator->connect(pair.listener->address()).value();
  auto memory = pair.initiator->allocate(3 * kMessage, Access::LocalWrite).value();
  auto* bytes = static_cast<unsigned char*>(memory->data());
  auto first = connection->post_recv(memory->slice(0, kMessage)).value();
  auto second = connection->post_recv(memory->slice(kMessage, kMessage)).value();
  auto challenge = connection->wait(first, 5s);
  ASSERT_TRUE(challenge && challenge->ok());
  EXPECT_EQ(std::memcmp(bytes, "RKPP", 4), 0);
  EXPECT_EQ(bytes[5], 1) << "the first message is not a challenge";
  EXPECT_EQ(challenge->bytes, 8u + 32u) << "the challenge is more than a header and a nonce";
  EXPECT_EQ(bytes[6] + 256 * bytes[7], 32) << "the challenge's payload is more than a nonce";
  bool nonce_set = false;
  for (std::size_t i = 8; i < 40; ++i) nonce_set |= bytes[i] != 0;
  EXPECT_TRUE(nonce_set) << "the challenge carries no nonce";
  // A proof of the right shape (nonce, MAC, no identity) whose MAC is made up.
  std::memcpy(bytes + 2 * kMessage, bytes, 40);
  bytes[2 * kMessage + 5] = 2;
  bytes[2 * kMessage + 6] = 64;
  std::memset(bytes + 2 * kMessage + 40, 0x5a, 32);
  auto sent = connection->send(memory->slice(2 * kMessage, 8 + 64));
  ASSERT_TRUE(sent);
  (void)connection->wait(*sent, 2s);
  auto other = accepted.get();
  ASSERT_FALSE(other) << "the acceptor accepted a made-up proof";
  EXPECT_EQ(other.error().code(), Errc::ConnectionRefused);
  auto answer = connection->wait(second, 2s);
  EXPECT_FALSE(answer && answer->ok()) << "the acceptor answered a made-up proof";
  for (std::size_t i = kMessage; i < 2 * kMessage; ++i)
    ASSERT_EQ(bytes[i], 0) << "the acceptor sent something after a bad proof";
}

// What a stranger can make an acceptor do before any proof: hold one bounded receive and wait out the
// timeout. A proof larger than the channel's bound fails the acceptor's receive, and the connection ends.
TEST(PeerProof, AnOversizedProofIsRefusedWithoutBeingRead) {
  constexpr std::size_t kHuge = 64 * 1024;
  Pair pair;
  auto accepted = std::async(std::launch::async, [&]() -> Result<std::string> {
    auto c = pair.listener->accept(5s);
    if (!c) return std::unexpected(c.error());
    return prove_accept(*pair.acceptor, **c, config("the acceptor's secret"), "acceptor-id");
  });
  auto connection = pair.initiator->connect(pair.listener->address()).value();
  auto memory = pair.initiator->allocate(kHuge + 256, Access::LocalWrite).value();
  auto first = connection->post_recv(memory->slice(0, 256)).value();
  ASSERT_TRUE(connection->wait(first, 5s));
  std::memset(static_cast<std::byte*>(memory->data()) + 256, 0x41, kHuge);
  auto sent = connection->send(memory->slice(256, kHuge));
  ASSERT_TRUE(sent);
  (void)connection->wait(*sent, 2s);
  auto start = std::chrono::steady_clock::now();
  auto other = accepted.get();
  ASSERT_FALSE(other) << "the acceptor accepted 64 KiB of 'A'";
  EXPECT_EQ(other.error().code(), Errc::ProtocolError) << other.error().describe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << "the acceptor waited out its timeout";
}

// An accept carries no nonce, so the frame's bound leaves room for an identity 32 bytes past
// kMaxPeerIdentity: the decoder refuses it (found by tests/fuzz/message_channel_fuzz.cpp).
TEST(PeerProof, AnAcceptWithAnIdentityPastTheBoundIsAProtocolError) {
  std::vector<std::byte> payload(sizeof(auth::Mac) + kMaxPeerIdentity + 1, std::byte{'x'});
  rdmakit::detail::Frame frame{.type = detail::kAccept, .payload = payload};
  auto decoded = detail::decode_proof(frame);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().code(), Errc::ProtocolError) << decoded.error().describe();
  frame.payload = std::span(payload).first(sizeof(auth::Mac) + kMaxPeerIdentity);
  auto longest = detail::decode_proof(frame);
  ASSERT_TRUE(longest) << longest.error().describe();
  EXPECT_EQ(longest->identity, std::string(kMaxPeerIdentity, 'x'));
}

TEST(PeerProof, AProcessOfAnotherUidCannotProveTheUserSecretOverLoopback) {
  if (auto why = stranger::unavailable(); !why.empty()) GTEST_SKIP() << why;
  ScopedEnv env({{"RDMAKIT_JOB_SECRET", std::nullopt}});
  auto secret = auth::service_secret("127.0.0.1", "the test acceptor");
  ASSERT_TRUE(secret) << secret.error().describe();
  Pair pair;
  auto serve = [&]() -> Result<std::string> {
    auto c = pair.listener->accept(20s);
    if (!c) return std::unexpected(c.error());
    return prove_accept(*pair.acceptor, **c, config(*secret), "acceptor-id");
  };
  std::map<std::string, std::string> child_env{{"RDMAKIT_TEST_ADDRESS", pair.listener->address()}};
  // The same uid, as a control: its own process reads the same file and proves it.
  auto same = std::async(std::launch::async, serve);
  auto ours = stranger::run("prove", child_env, false);
  EXPECT_TRUE(ours.output.starts_with("PROVEN acceptor-id")) << ours.output;
  EXPECT_TRUE(same.get().has_value());
  auto other = std::async(std::launch::async, serve);
  auto theirs = stranger::run("prove", child_env, true);
  EXPECT_EQ(theirs.status, 0) << theirs.output;
  EXPECT_TRUE(theirs.output.starts_with("REFUSED")) << theirs.output;
  EXPECT_EQ(theirs.output.find("acceptor-id"), std::string::npos) << "the stranger learnt our identity";
  auto refused = other.get();
  ASSERT_FALSE(refused) << "uid 65534 proved our user secret";
  EXPECT_EQ(refused.error().code(), Errc::ConnectionRefused);
}

}  // namespace
}  // namespace rdmakit::bootstrap
