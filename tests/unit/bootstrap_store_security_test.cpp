// The rendezvous store against strangers and misbehaving clients: without the job secret nothing is
// served, keys are write-once, every cap is an option with an error naming it, a client that does not read
// its replies only delays itself, and without a secret a one-host launch binds loopback only.
//
// Everything is configured through the environment (RDMAKIT_JOB_SECRET, RDMAKIT_STORE_MAX_*), the way a
// launch configures it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "core/fd.hpp"
#include "rdmakit/bootstrap.hpp"
#include "stranger.hpp"
#include "support/test_support.hpp"

#if __has_include("bootstrap/auth.hpp")
#include "bootstrap/auth.hpp"
#include "bootstrap/store_wire.hpp"
#define RDMAKIT_STORE_HAS_AUTH 1
#endif

namespace rdmakit::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr const char* kSecret = "correct horse battery staple";

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  using Vars = std::map<std::string, std::string>;
  explicit ScopedEnv(const Vars& vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [name, value] : saved_)
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

Fd raw_connect(const std::string& host, std::uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return Fd();
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void send_bytes(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Everything the peer sends until it closes or `quiet` passes without a byte.
std::string read_until_quiet(int fd, std::chrono::milliseconds quiet) {
  std::string got;
  char chunk[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(quiet.count())) <= 0) return got;
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return got;
    got.append(chunk, static_cast<std::size_t>(n));
  }
}

std::string request(std::uint8_t op, const std::string& key, const std::string& value) {
  std::string out(1, static_cast<char>(op));
  auto k = static_cast<std::uint32_t>(key.size()), v = static_cast<std::uint32_t>(value.size());
  out.append(reinterpret_cast<const char*>(&k), 4);
  out.append(reinterpret_cast<const char*>(&v), 4);
  return out + key + value;
}

// A client that speaks the protocol with raw sockets, so a test can misbehave (pipeline requests and not
// read the replies). With the secret handshake when the store has one.
Fd authenticated_raw_client(std::uint16_t port, const std::string& secret) {
  Fd fd = raw_connect("127.0.0.1", port);
#ifdef RDMAKIT_STORE_HAS_AUTH
  auto nonce = auth::fresh_nonce();
  send_bytes(fd.get(), std::string(wire::kHelloMagic) + std::string(auth::bytes(*nonce)));
  std::string challenge;
  while (challenge.size() < 5 + 32) {
    char c[64];
    ssize_t n = ::recv(fd.get(), c, 5 + 32 - challenge.size(), 0);
    if (n <= 0) return Fd();
    challenge.append(c, static_cast<std::size_t>(n));
  }
  auto proof = auth::mac(secret, {wire::kMacLabel, "client", auth::bytes(*nonce), challenge.substr(5)});
  send_bytes(fd.get(), std::string(reinterpret_cast<const char*>(proof.data()), proof.size()));
  std::string answer;
  while (answer.size() < 5 + 32) {
    char c[64];
    ssize_t n = ::recv(fd.get(), c, 5 + 32 - answer.size(), 0);
    if (n <= 0) return Fd();
    answer.append(c, static_cast<std::size_t>(n));
  }
#else
  (void)secret;
#endif
  return fd;
}

std::shared_ptr<TcpStore> open_server() {
  auto server = TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
  EXPECT_TRUE(server.has_value()) << server.error().describe();
  return server ? *server : nullptr;
}

Result<std::shared_ptr<TcpStore>> open_client(std::uint16_t port) {
  return TcpStore::open({.host = "127.0.0.1", .port = port, .timeout = 2000ms});
}

TEST(StoreSecurity, AStrangerWithoutTheSecretReadsNothing) {
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret}});
  auto server = open_server();
  ASSERT_TRUE(server);
  const std::string published = "10.0.0.1:4711\nSTAGING-DESCRIPTOR";
  ASSERT_TRUE(server->set("coll/net/0", published).has_value());
  // The stranger asks as the old, unauthenticated protocol did.
  Fd stranger = raw_connect("127.0.0.1", server->bound_port());
  ASSERT_TRUE(stranger);
  send_bytes(stranger.get(), request(2, "coll/net/0", ""));
  std::string reply = read_until_quiet(stranger.get(), 500ms);
  EXPECT_EQ(reply.find("10.0.0.1"), std::string::npos) << "the store served a stranger";
  EXPECT_EQ(reply.find("STAGING"), std::string::npos);
}

TEST(StoreSecurity, AClientWithAWrongSecretIsRefused) {
  std::shared_ptr<TcpStore> server;
  {
    ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret}});
    server = open_server();
    ASSERT_TRUE(server);
    ASSERT_TRUE(server->set("k", "v").has_value());
  }
  ScopedEnv wrong(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", "not the secret of this job"}});
  auto client = open_client(server->bound_port());
  ASSERT_FALSE(client.has_value()) << "a client with the wrong secret got in";
  EXPECT_EQ(client.error().code(), Errc::ConnectionRefused) << client.error().describe();
  EXPECT_NE(client.error().message().find("job secret"), std::string::npos) << client.error().describe();
}

TEST(StoreSecurity, ASecretTooShortIsAnErrorNamingTheOption) {
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", "short"}});
  auto server = TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
  ASSERT_FALSE(server.has_value());
  EXPECT_NE(server.error().message().find("RDMAKIT_JOB_SECRET"), std::string::npos)
      << server.error().describe();
}

TEST(StoreSecurity, KeysAreWriteOnce) {
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret}});
  auto server = open_server();
  ASSERT_TRUE(server);
  auto client = open_client(server->bound_port());
  ASSERT_TRUE(client.has_value()) << client.error().describe();
  ASSERT_TRUE(server->set("coll/net/0", "real").has_value());
  auto again = (*client)->set("coll/net/0", "forged");
  ASSERT_FALSE(again.has_value()) << "a second SET replaced a published key";
  EXPECT_NE(again.error().message().find("coll/net/0"), std::string::npos) << again.error().describe();
  EXPECT_EQ(*(*client)->get("coll/net/0", 1000ms), "real");

  auto memory = make_memory_store();
  ASSERT_TRUE(memory->set("k", "real").has_value());
  auto twice = memory->set("k", "forged");
  ASSERT_FALSE(twice.has_value());
  EXPECT_NE(twice.error().message().find("'k'"), std::string::npos);
  EXPECT_EQ(*memory->get("k", 10ms), "real");
}

TEST(StoreSecurity, ARequestOverTheSizeCapIsRefused) {
  ScopedEnv env(
      ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret}, {"RDMAKIT_STORE_MAX_REQUEST_BYTES", "1024"}});
  auto server = open_server();
  ASSERT_TRUE(server);
  auto big = server->set("big", std::string(2000, 'x'));
  ASSERT_FALSE(big.has_value()) << "a 2000-byte SET passed a 1024-byte cap";
  EXPECT_NE(big.error().message().find("store_max_request_bytes"), std::string::npos)
      << big.error().describe();
}

TEST(StoreSecurity, TheStoreStopsAtItsTotalCap) {
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret}, {"RDMAKIT_STORE_MAX_BYTES", "4096"}});
  auto server = open_server();
  ASSERT_TRUE(server);
  Result<void> last;
  int stored = 0;
  for (int i = 0; i < 8 && last; ++i)
    if ((last = server->set("k" + std::to_string(i), std::string(1000, 'x')))) ++stored;
  ASSERT_FALSE(last.has_value()) << "8000 bytes went into a store capped at 4096";
  EXPECT_EQ(stored, 4);
  EXPECT_EQ(last.error().code(), Errc::ResourceExhausted);
  EXPECT_NE(last.error().message().find("store_max_bytes"), std::string::npos) << last.error().describe();
}

TEST(StoreSecurity, ClientsBeyondTheCapAreToldWhy) {
  testing::expect_warning("store_max_clients");
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret}, {"RDMAKIT_STORE_MAX_CLIENTS", "2"}});
  auto server = open_server();  // its own client is the first
  ASSERT_TRUE(server);
  auto second = open_client(server->bound_port());
  ASSERT_TRUE(second.has_value()) << second.error().describe();
  auto third = open_client(server->bound_port());
  ASSERT_FALSE(third.has_value()) << "a third client got into a store capped at 2";
  EXPECT_NE(third.error().message().find("store_max_clients"), std::string::npos) << third.error().describe();
  second->reset();
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(open_client(server->bound_port()).has_value()) << "a freed slot was not reused";
}

TEST(StoreSecurity, AClientThatLeavesRepliesUnreadIsDropped) {
  testing::expect_warning("store_max_client_buffer_bytes");
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret},
                                {"RDMAKIT_STORE_MAX_REQUEST_BYTES", "1048576"},
                                {"RDMAKIT_STORE_MAX_CLIENT_BUFFER_BYTES", "2097152"}});
  auto server = open_server();
  ASSERT_TRUE(server);
  const std::string value(512 * 1024, 'v');
  ASSERT_TRUE(server->set("half", value).has_value());
  Fd greedy = authenticated_raw_client(server->bound_port(), kSecret);
  ASSERT_TRUE(greedy);
  std::string burst;
  for (int i = 0; i < 64; ++i) burst += request(2, "half", "");
  send_bytes(greedy.get(), burst);
  std::this_thread::sleep_for(400ms);  // replies pile up at the server meanwhile
  std::size_t got = read_until_quiet(greedy.get(), 1000ms).size();
  EXPECT_LT(got, 64 * value.size()) << "the server buffered 32 MiB of replies for one client";
  EXPECT_EQ(testing::warnings_seen(), 1u) << "no warning naming the cap that dropped the client";
  // The store still serves everyone else.
  auto honest = open_client(server->bound_port());
  ASSERT_TRUE(honest.has_value()) << honest.error().describe();
  EXPECT_EQ((*honest)->get("half", 1000ms)->size(), value.size());
}

TEST(StoreSecurity, SlowReadersDoNotDelayAnHonestGet) {
  testing::expect_warning("store_max_client_buffer_bytes");
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", kSecret}});
  auto server = open_server();
  ASSERT_TRUE(server);
  ASSERT_TRUE(server->set("big", std::string(1 << 20, 'b')).has_value());
  ASSERT_TRUE(server->set("small", "s").has_value());
  auto honest = open_client(server->bound_port());
  ASSERT_TRUE(honest.has_value()) << honest.error().describe();
  std::vector<Fd> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(authenticated_raw_client(server->bound_port(), kSecret));
    ASSERT_TRUE(slow.back());
    std::string burst;
    for (int j = 0; j < 32; ++j) burst += request(2, "big", "");
    send_bytes(slow.back().get(), burst);  // and never read
  }
  std::this_thread::sleep_for(50ms);
  std::chrono::nanoseconds worst{};
  for (int i = 0; i < 5; ++i) {
    auto start = Clock::now();
    auto value = (*honest)->get("small", 5000ms);
    worst = std::max(worst, Clock::now() - start);
    ASSERT_TRUE(value.has_value()) << value.error().describe();
  }
  RecordProperty("worst_honest_get_us",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(worst).count()));
  EXPECT_LT(worst, 200ms) << "an honest GET took "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(worst).count()
                          << " ms behind 4 slow readers";
}

// The first IPv4 address of this machine that is not loopback, or empty.
std::string non_loopback_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    found = text;
  }
  freeifaddrs(list);
  return found;
}

std::uint16_t free_port() {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &length);
  return ntohs(addr.sin_port);
}

Result<LaunchInfo> torchrun_launch(const std::string& host, std::uint16_t port, int local_world_size) {
  std::map<std::string, std::string> vars{{"RANK", "0"},
                                          {"WORLD_SIZE", "2"},
                                          {"LOCAL_WORLD_SIZE", std::to_string(local_world_size)},
                                          {"MASTER_ADDR", host},
                                          {"MASTER_PORT", std::to_string(port)}};
  return detect_launch([vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

TEST(StoreSecurity, WithoutASecretAOneHostLaunchBindsLoopbackOnly) {
  std::string address = non_loopback_address();
  if (address.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", ""}});
  std::uint16_t port = free_port();
  auto launch = torchrun_launch(address, port, 2);
  ASSERT_TRUE(launch.has_value()) << launch.error().describe();
  auto store = open_store(*launch, 2000ms);
  ASSERT_TRUE(store.has_value()) << store.error().describe();
  EXPECT_FALSE(raw_connect(address, port)) << "an unauthenticated store is reachable at " << address;
  EXPECT_TRUE(raw_connect("127.0.0.1", port));
}

TEST(StoreSecurity, WithoutASecretALaunchAcrossHostsIsRefusedUnlessInsecure) {
  std::string address = non_loopback_address();
  if (address.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", ""}, {"RDMAKIT_INSECURE", "0"}});
  std::uint16_t port = free_port();
  auto launch = torchrun_launch(address, port, 1);
  ASSERT_TRUE(launch.has_value()) << launch.error().describe();
  auto refused = open_store(*launch, 2000ms);
  ASSERT_FALSE(refused.has_value()) << "a store beyond loopback started without a job secret";
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument);
  EXPECT_NE(refused.error().message().find("job_secret"), std::string::npos) << refused.error().message();
  EXPECT_NE(refused.error().message().find("insecure"), std::string::npos) << refused.error().message();
  EXPECT_FALSE(raw_connect(address, port)) << "the refused store listens anyway";

  testing::expect_warning("UNAUTHENTICATED");
  ScopedEnv insecure(ScopedEnv::Vars{{"RDMAKIT_INSECURE", "1"}});
  auto store = open_store(*launch, 2000ms);
  ASSERT_TRUE(store.has_value()) << store.error().describe();
  EXPECT_GE(testing::warnings_seen(), 1u) << "no warning that the store is unauthenticated";
}

// Run as uid 65534 (stranger.hpp): a client of the store at 127.0.0.1:$RDMAKIT_TEST_PORT with no job
// secret, as any process of that user would open it; prints what it read.
int read_store_as_stranger() {
  auto port = static_cast<std::uint16_t>(std::atoi(std::getenv("RDMAKIT_TEST_PORT")));
  auto client = TcpStore::open({.host = "127.0.0.1", .port = port, .timeout = 2000ms});
  if (!client) return std::printf("REFUSED %s\n", client.error().describe().c_str()), 0;
  auto value = (*client)->get("coll/net/0", 1000ms);
  if (!value) return std::printf("REFUSED get: %s\n", value.error().describe().c_str()), 0;
  std::printf("READ %s\n", value->c_str());
  return 0;
}

const int kParts = rdmakit::testing::stranger::parts({{"read-store", read_store_as_stranger}});

TEST(StoreSecurity, WithoutAJobSecretAnotherUidReadsNothing) {
  if (auto why = rdmakit::testing::stranger::unavailable(); !why.empty()) GTEST_SKIP() << why;
  ScopedEnv env(ScopedEnv::Vars{{"RDMAKIT_JOB_SECRET", ""}});
  auto server = open_server();
  ASSERT_TRUE(server);
  ASSERT_TRUE(server->set("coll/net/0", "127.0.0.1:4242 rank 0's listener"));
  std::map<std::string, std::string> child{{"RDMAKIT_TEST_PORT", std::to_string(server->bound_port())}};
  auto ours = rdmakit::testing::stranger::run("read-store", child, false);
  EXPECT_TRUE(ours.output.starts_with("READ 127.0.0.1:4242")) << "a process of our uid: " << ours.output;
  auto theirs = rdmakit::testing::stranger::run("read-store", child, true);
  EXPECT_EQ(theirs.status, 0) << theirs.output;
  EXPECT_TRUE(theirs.output.starts_with("REFUSED")) << theirs.output;
  EXPECT_EQ(theirs.output.find("4242"), std::string::npos) << "uid 65534 read the store: " << theirs.output;
}

}  // namespace
}  // namespace rdmakit::bootstrap
