// The metadata store over every backend: the same cases against the builtin server, a real redis-server and
// a real etcd, each started by the test on loopback ports of its own (servers.hpp).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/fd.hpp"
#include "servers.hpp"
#include "support/test_support.hpp"
#include "xfer/metadata/connection.hpp"
#include "xfer/metadata/http.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::byte> bytes(std::string_view text) {
  auto data = reinterpret_cast<const std::byte*>(text.data());
  return {data, data + text.size()};
}

std::optional<std::string> text(const std::optional<std::vector<std::byte>>& value) {
  if (!value) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(value->data()), value->size());
}

// Polls lookup(key) until `wanted` (a value, or nullopt for "gone") or `limit`; the last value seen.
std::optional<std::string> await(MetadataStore& store, std::string_view key,
                                 const std::optional<std::string>& wanted, std::chrono::milliseconds limit) {
  auto deadline = Clock::now() + limit;
  std::optional<std::string> seen;
  do {
    auto value = store.lookup(key);
    seen = value ? text(*value) : std::optional<std::string>("<error: " + value.error().message() + ">");
    if (seen == wanted) return seen;
    std::this_thread::sleep_for(20ms);
  } while (Clock::now() < deadline);
  return seen;
}

class MetadataTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    server_ = make_server(GetParam(), why);
    if (server_) return;
    // CI installs both servers (scripts/setup.sh): a missing one fails there. A developer without them may
    // skip these cases explicitly.
    if (std::getenv("RDMAKIT_TEST_SKIP_MISSING_SERVERS") != nullptr)
      GTEST_SKIP() << "SKIPPED: " << why << " (RDMAKIT_TEST_SKIP_MISSING_SERVERS is set)";
    FAIL() << why << ". Install it, or set RDMAKIT_TEST_SKIP_MISSING_SERVERS=1 to skip these cases on a "
           << "developer machine.";
  }

  std::unique_ptr<MetadataStore> open(const std::string& name_space = "test") {
    auto store = open_metadata(server_->url(), test_options(GetParam(), name_space));
    EXPECT_TRUE(store) << (store ? "" : store.error().describe());
    return store ? std::move(*store) : nullptr;
  }

  std::unique_ptr<Server> server_;
};

TEST_P(MetadataTest, PublishLookupListUnpublish) {
  auto owner = open();
  auto peer = open();
  ASSERT_TRUE(owner && peer);
  EXPECT_EQ(owner->backend(), GetParam());
  ASSERT_TRUE(owner->publish("kv-pool", bytes("endpoint=a;rkey=1")));
  ASSERT_TRUE(owner->publish("weights", bytes(std::string("\0\x01\xff binary", 10))));
  auto value = peer->lookup("kv-pool");
  ASSERT_TRUE(value) << value.error().describe();
  EXPECT_EQ(text(*value), "endpoint=a;rkey=1");
  EXPECT_EQ(text(*peer->lookup("weights")), std::string("\0\x01\xff binary", 10));
  EXPECT_EQ(text(*peer->lookup("absent")), std::nullopt);

  // Publishing again replaces the value.
  ASSERT_TRUE(owner->publish("kv-pool", bytes("endpoint=b;rkey=2")));
  EXPECT_EQ(text(*peer->lookup("kv-pool")), "endpoint=b;rkey=2");

  auto keys = peer->list();
  ASSERT_TRUE(keys) << keys.error().describe();
  EXPECT_EQ(*keys, (std::vector<std::string>{"kv-pool", "weights"}));

  ASSERT_TRUE(owner->unpublish("kv-pool"));
  EXPECT_EQ(text(*peer->lookup("kv-pool")), std::nullopt);
  EXPECT_EQ(*peer->list(), std::vector<std::string>{"weights"});
  auto again = owner->unpublish("kv-pool");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Errc::NotFound);
}

TEST_P(MetadataTest, LookupIsOneRoundTrip) {
  auto owner = open();
  ASSERT_TRUE(owner);
  ASSERT_TRUE(owner->publish("segment", bytes("x")));
  auto peer = open();
  auto before = peer->round_trips();
  ASSERT_TRUE(peer->lookup("segment"));
  // The peer owns nothing, so its renewal thread makes no round trips of its own.
  EXPECT_EQ(peer->round_trips(), before + 1);
}

TEST_P(MetadataTest, NamespacesAreApart) {
  auto prefill = open("prefill");
  auto decode = open("decode");
  auto prefix = open("pre");  // a namespace that is a prefix of another sees none of its keys
  ASSERT_TRUE(prefill && decode && prefix);
  ASSERT_TRUE(prefill->publish("block", bytes("from prefill")));
  ASSERT_TRUE(decode->publish("block", bytes("from decode")));
  EXPECT_EQ(text(*prefill->lookup("block")), "from prefill");
  EXPECT_EQ(text(*decode->lookup("block")), "from decode");
  EXPECT_EQ(*prefill->list(), std::vector<std::string>{"block"});
  EXPECT_EQ(*decode->list(), std::vector<std::string>{"block"});
  EXPECT_TRUE(prefix->list()->empty());
  EXPECT_EQ(text(*prefix->lookup("fill/block")), std::nullopt);
}

TEST_P(MetadataTest, CloseRemovesTheOwnersEntries) {
  auto peer = open();
  ASSERT_TRUE(peer);
  {
    auto owner = open();
    ASSERT_TRUE(owner->publish("a", bytes("1")));
    ASSERT_TRUE(owner->publish("b", bytes("2")));
    EXPECT_EQ(peer->list()->size(), 2u);
  }
  EXPECT_TRUE(peer->list()->empty());  // at once, not after the TTL
}

// A store idle past the ttl (on etcd its unused lease lapses) publishes all the same, and what it publishes
// outlives the ttl as long as it renews.
TEST_P(MetadataTest, EntriesOutliveTheTtlWhileRenewed) {
  auto options = test_options(GetParam());
  auto owner = open();
  auto peer = open();
  ASSERT_TRUE(owner && peer);
  std::this_thread::sleep_for(options.ttl + 1500ms);
  ASSERT_TRUE(owner->publish("long-lived", bytes("v")));
  ASSERT_TRUE(owner->publish("second", bytes("w")));
  std::this_thread::sleep_for(options.ttl * 2);
  EXPECT_EQ(text(*peer->lookup("long-lived")), "v");
  EXPECT_EQ(text(*peer->lookup("second")), "w");
}

TEST_P(MetadataTest, KilledOwnersEntriesExpire) {
  auto options = test_options(GetParam());
  TempDir dir;
  auto owner =
      Process::spawn({XFER_METADATA_OWNER, server_->url(), "test", "owned", "by-the-child",
                      std::to_string(options.ttl.count()), std::to_string(options.renew_interval.count())},
                     dir.path() + "/owner.log", true);
  ASSERT_EQ(owner.read_line(10s), "ready");
  auto peer = open();
  ASSERT_TRUE(peer);
  EXPECT_EQ(text(*peer->lookup("owned")), "by-the-child");
  owner.kill_now();  // SIGKILL: no close, no unpublish
  auto killed = Clock::now();
  // etcd checks for expired leases every 500 ms.
  EXPECT_EQ(await(*peer, "owned", std::nullopt, options.ttl + 2s), std::nullopt);
  EXPECT_GE(Clock::now() - killed, options.ttl / 2)
      << "gone before its ttl: it was not the ttl that removed it";
}

// A live name belongs to its first publisher: a second store's publish is refused and changes nothing,
// until the owner unpublishes.
TEST_P(MetadataTest, ALiveNameBelongsToItsFirstPublisher) {
  auto owner = open();
  auto second = open();
  ASSERT_TRUE(owner && second);
  ASSERT_TRUE(owner->publish("name", bytes("first")));
  auto refused = second->publish("name", bytes("second"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument) << refused.error().describe();
  EXPECT_NE(refused.error().message().find("another store"), std::string::npos) << refused.error().message();
  EXPECT_EQ(text(*second->lookup("name")), "first");
  EXPECT_FALSE(second->unpublish("name"));                     // not its own
  ASSERT_TRUE(owner->publish("name", bytes("first, again")));  // the owner replaces its own value
  EXPECT_EQ(text(*second->lookup("name")), "first, again");
  std::this_thread::sleep_for(test_options(GetParam()).renew_interval * 2);
  EXPECT_TRUE(owner->replaced().empty());  // its own renewals see its own value
  ASSERT_TRUE(owner->unpublish("name"));
  ASSERT_TRUE(second->publish("name", bytes("second"))) << "free again after the unpublish";
  EXPECT_EQ(text(*owner->lookup("name")), "second");
}

// An owner stopped past its ttl (SIGSTOP) loses its name; another store takes it. When the owner runs
// again its renewal compares before it renews: it reports the key replaced (and stops renewing it)
// instead of succeeding silently or writing its old value back over the new owner's.
TEST_P(MetadataTest, RenewalReportsARecordReplacedUnderIt) {
  auto options = test_options(GetParam());
  TempDir dir;
  auto owner =
      Process::spawn({XFER_METADATA_OWNER, server_->url(), "test", "owned", "by-the-child",
                      std::to_string(options.ttl.count()), std::to_string(options.renew_interval.count())},
                     dir.path() + "/owner.log", true);
  ASSERT_EQ(owner.read_line(10s), "ready");
  auto peer = open();
  ASSERT_TRUE(peer);
  ASSERT_EQ(::kill(owner.pid(), SIGSTOP), 0);
  ASSERT_EQ(await(*peer, "owned", std::nullopt, options.ttl + 2s), std::nullopt);
  ASSERT_TRUE(peer->publish("owned", bytes("by-the-peer")));
  ASSERT_EQ(::kill(owner.pid(), SIGCONT), 0);
  EXPECT_EQ(owner.read_line(options.renew_interval * 5 + options.timeout), "replaced owned");
  std::this_thread::sleep_for(options.renew_interval * 2);
  EXPECT_EQ(text(*peer->lookup("owned")), "by-the-peer");
}

TEST_P(MetadataTest, RestartedServerIsRepopulatedByLiveOwners) {
  rdmakit::testing::expect_warning("lease renewal failed");
  auto options = test_options(GetParam());
  auto owner = open();
  ASSERT_TRUE(owner);
  ASSERT_TRUE(owner->publish("survivor", bytes("still here")));
  ASSERT_TRUE(owner->publish("second", bytes("too")));
  server_->stop();
  std::this_thread::sleep_for(options.renew_interval * 2);  // renewals fail meanwhile
  server_->start();                                         // empty: the keys are gone
  auto peer = open();
  ASSERT_TRUE(peer);
  EXPECT_EQ(await(*peer, "survivor", "still here", options.renew_interval * 3 + options.timeout),
            "still here");
  EXPECT_EQ(await(*peer, "second", "too", 1s), "too");
}

// Nothing listens on the port: an error naming the URL, well within the timeout.
TEST_P(MetadataTest, UnreachableServerIsAnErrorNamingIt) {
  std::string url = GetParam() + "://127.0.0.1:" + std::to_string(free_port());
  auto started = Clock::now();
  auto store = open_metadata(url, test_options(GetParam()));
  ASSERT_FALSE(store);
  EXPECT_LT(Clock::now() - started, test_options(GetParam()).timeout + 500ms);
  EXPECT_NE(store.error().message().find(url), std::string::npos) << store.error().message();
}

// A server that accepts but never answers: a Timeout within the bound, not a hang.
TEST_P(MetadataTest, SilentServerTimesOut) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener.get(), 8), 0);
  socklen_t length = sizeof(address);
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length);
  std::string url = GetParam() + "://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  auto options = test_options(GetParam());
  options.timeout = 300ms;
  auto started = Clock::now();
  auto store = open_metadata(url, options);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code(), Errc::Timeout) << store.error().describe();
  EXPECT_LT(Clock::now() - started, 1s);
  EXPECT_NE(store.error().message().find(url), std::string::npos) << store.error().message();
}

// A server that writes nonsense: a clean error (no crash, no hang), whatever the nonsense.
TEST_P(MetadataTest, GarbageServerIsAProtocolError) {
  for (std::string garbage :
       {std::string("\xff\xfe garbage \r\n\r\n\x01\x02"), std::string("HTTP/1.1 200 OK\r\n\r\n"),
        std::string("+PANG\r\n:12\n"), std::string("$99999999999\r\n"),
        std::string("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{\"a\":")}) {
    Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::listen(listener.get(), 8), 0);
    socklen_t length = sizeof(address);
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length);
    std::jthread fake([&] {  // answers the first request with the garbage, then closes
      Fd client(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      char scratch[4096];
      [[maybe_unused]] auto n = ::recv(client.get(), scratch, sizeof(scratch), 0);
      [[maybe_unused]] auto m = ::send(client.get(), garbage.data(), garbage.size(), MSG_NOSIGNAL);
      std::this_thread::sleep_for(100ms);
    });
    std::string url = GetParam() + "://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
    auto options = test_options(GetParam());
    options.timeout = 1s;
    auto store = open_metadata(url, options);
    ASSERT_FALSE(store) << "garbage accepted: " << garbage;
    auto code = store.error().code();
    EXPECT_TRUE(code == Errc::ProtocolError || code == Errc::ConnectionBroken) << store.error().describe();
    EXPECT_NE(store.error().message().find(url), std::string::npos) << store.error().message();
  }
}

// Without a job secret the builtin server is unauthenticated: it refuses to listen beyond loopback.
TEST(MetadataServer, UnauthenticatedServesLoopbackOnly) {
  ASSERT_EQ(std::getenv("RDMAKIT_JOB_SECRET"), nullptr) << "this case needs no job secret in the environment";
  auto server = serve_builtin_metadata("0.0.0.0:0");
  ASSERT_FALSE(server);
  EXPECT_NE(server.error().message().find("RDMAKIT_JOB_SECRET"), std::string::npos)
      << server.error().message();
  EXPECT_FALSE(serve_builtin_metadata("127.0.0.1"));  // no port
  EXPECT_TRUE(serve_builtin_metadata("127.0.0.1:0"));
}

// With a job secret, a client that does not know it is refused before anything is served.
TEST(MetadataServer, ClientsProveTheJobSecret) {
  ::setenv("RDMAKIT_JOB_SECRET", "the right secret, 16+ chars", 1);
  auto server = serve_builtin_metadata("127.0.0.1:0");
  ASSERT_TRUE(server) << server.error().describe();
  {
    auto store = open_metadata((*server)->url(), test_options("builtin"));
    ASSERT_TRUE(store) << store.error().describe();
    ASSERT_TRUE((*store)->publish("k", bytes("v")));
  }
  ::setenv("RDMAKIT_JOB_SECRET", "a wrong secret, 16+ chars", 1);
  auto stranger = open_metadata((*server)->url(), test_options("builtin"));
  ::unsetenv("RDMAKIT_JOB_SECRET");
  ASSERT_FALSE(stranger);
  EXPECT_EQ(stranger.error().code(), Errc::ConnectionRefused) << stranger.error().describe();
  EXPECT_NE(stranger.error().message().find("secret"), std::string::npos) << stranger.error().message();
}

// Redis's own password (requirepass) as a second wall: a store with the password works, one without it
// or with a wrong one is refused before it reads or writes anything.
TEST(MetadataRedis, AuthPasswordIsASecondWall) {
  if (::access("/usr/bin/redis-server", X_OK) != 0) {
    if (std::getenv("RDMAKIT_TEST_SKIP_MISSING_SERVERS") != nullptr)
      GTEST_SKIP() << "SKIPPED: no redis-server";
    FAIL() << "/usr/bin/redis-server is not installed (Debian package redis-server)";
  }
  TempDir dir;
  auto port = free_port();
  auto server = Process::spawn({"/usr/bin/redis-server", "--port", std::to_string(port), "--bind",
                                "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir.path(),
                                "--loglevel", "warning", "--requirepass", "the redis password"},
                               dir.path() + "/redis.log");
  const std::string url = "redis://127.0.0.1:" + std::to_string(port);
  auto options = test_options("redis");
  options.password = "the redis password";
  std::unique_ptr<MetadataStore> store;
  for (auto deadline = Clock::now() + 10s; !store && Clock::now() < deadline;
       std::this_thread::sleep_for(50ms)) {
    if (auto opened = open_metadata(url, options)) store = std::move(*opened);
  }
  ASSERT_TRUE(store) << "redis-server with --requirepass did not come up";
  ASSERT_TRUE(store->publish("k", bytes("v")));
  EXPECT_EQ(text(*store->lookup("k")), "v");
  auto without = open_metadata(url, test_options("redis"));
  ASSERT_FALSE(without);
  EXPECT_NE(without.error().message().find("NOAUTH"), std::string::npos) << without.error().describe();
  options.password = "a wrong password";
  auto wrong = open_metadata(url, options);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code(), Errc::ConnectionRefused) << wrong.error().describe();
}

// etcd's own users as a second wall: with auth enabled (a root user), a store with the user's password
// works, one without it or with a wrong one is refused.
TEST(MetadataEtcd, UserPasswordIsASecondWall) {
  std::string why;
  auto server = make_server("etcd", why);
  if (!server) {
    if (std::getenv("RDMAKIT_TEST_SKIP_MISSING_SERVERS") != nullptr) GTEST_SKIP() << "SKIPPED: " << why;
    FAIL() << why;
  }
  auto port = static_cast<std::uint16_t>(std::stoi(server->url().substr(server->url().rfind(':') + 1)));
  std::string host = "127.0.0.1:" + std::to_string(port);
  metadata::Connection admin("127.0.0.1", port, server->url());
  auto post = [&](std::string_view path, const std::string& body) {
    auto reply =
        admin.exchange<metadata::http::Response>(metadata::http::post(host, path, body), Clock::now() + 5s,
                                                 [](std::string_view in, std::size_t& consumed) {
                                                   return metadata::http::parse_response(in, consumed);
                                                 });
    EXPECT_TRUE(reply) << path << ": " << (reply ? "" : reply.error().describe());
    return reply ? reply->status : 0;
  };
  EXPECT_EQ(post("/v3/auth/user/add", R"({"name":"root","password":"the etcd password"})"), 200);
  post("/v3/auth/role/add", R"({"name":"root"})");  // built in on some versions
  EXPECT_EQ(post("/v3/auth/user/grant", R"({"user":"root","role":"root"})"), 200);
  EXPECT_EQ(post("/v3/auth/enable", "{}"), 200);

  auto options = test_options("etcd");
  options.username = "root";
  options.password = "the etcd password";
  auto store = open_metadata(server->url(), options);
  ASSERT_TRUE(store) << store.error().describe();
  ASSERT_TRUE((*store)->publish("k", bytes("v")));
  EXPECT_EQ(text(*(*store)->lookup("k")), "v");
  // No user: etcd 3.4 grants it a lease, but it can neither read nor write a key.
  if (auto anonymous = open_metadata(server->url(), test_options("etcd"))) {
    EXPECT_FALSE((*anonymous)->publish("k", bytes("squatted")));
    EXPECT_FALSE((*anonymous)->lookup("k"));
    EXPECT_FALSE((*anonymous)->publish("other", bytes("squatted")));
  }
  EXPECT_EQ(text(*(*store)->lookup("k")), "v");
  options.password = "a wrong password";
  auto wrong = open_metadata(server->url(), options);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code(), Errc::ConnectionRefused) << wrong.error().describe();
}

#ifdef RDMAKIT_METADATA_TOOL
// Without a job secret the builtin store proves the per-user secret: a process of another uid (setpriv,
// as nobody) cannot read a record, list names, or squat one; before, it could do all three.
TEST(MetadataServer, AnotherUidCannotUseTheBuiltinStore) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching to uid 65534 needs root";
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) is not installed";
  ASSERT_EQ(std::getenv("RDMAKIT_JOB_SECRET"), nullptr) << "this case needs no job secret in the environment";
  auto server = serve_builtin_metadata("127.0.0.1:0");
  ASSERT_TRUE(server) << server.error().describe();
  auto owner = open_metadata((*server)->url(), test_options("builtin", "tool"));
  ASSERT_TRUE(owner) << owner.error().describe();
  ASSERT_TRUE((*owner)->publish("segment", bytes("descriptor\n")));
  TempDir dir;
  for (const char* command : {"get", "list"}) {
    std::vector<std::string> argv{
        "/usr/bin/setpriv",    "--reuid", "65534",          "--regid", "65534", "--clear-groups",
        RDMAKIT_METADATA_TOOL, command,   (*server)->url(), "tool"};
    if (std::string(command) == "get") argv.push_back("segment");
    auto log = dir.path() + "/" + command + ".log";
    auto stranger = Process::spawn(argv, log, true);
    EXPECT_EQ(stranger.read_line(10s), std::nullopt) << command << " as another uid printed something";
    std::ifstream in(log);
    std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(said.find("secret"), std::string::npos) << command << ": " << said;
  }
  EXPECT_EQ(text(*(*owner)->lookup("segment")), "descriptor\n");
}
#endif

// The connection's connect (core/net.hpp's helper) is bounded by the deadline: a listener whose accept
// queue is full drops further SYNs, so the connect stays in progress until the deadline, then a Timeout
// naming the server; nobody listening is ConnectionRefused naming it.
TEST(MetadataConnection, ConnectIsBoundedByTheDeadline) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener.get(), 0), 0);
  socklen_t length = sizeof(address);
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length);
  // Connect (never accepted) until one no longer completes: the queue is full from then on.
  std::vector<Fd> fillers;
  bool full = false;
  for (int i = 0; i < 16 && !full; ++i) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
    pollfd p{fd.get(), POLLOUT, 0};
    full = ::poll(&p, 1, 200) == 0;
    fillers.push_back(std::move(fd));
  }
  ASSERT_TRUE(full) << "16 connects to a listener with backlog 0 all completed: no full queue to test with";
  std::uint16_t port = ntohs(address.sin_port);
  std::string where = "redis://127.0.0.1:" + std::to_string(port);
  auto started = Clock::now();
  auto socket = metadata::Socket::connect("127.0.0.1", port, Clock::now() + 300ms, where);
  auto took = Clock::now() - started;
  ASSERT_FALSE(socket);
  EXPECT_EQ(socket.error().code(), Errc::Timeout) << socket.error().describe();
  EXPECT_TRUE(socket.error().message().starts_with(where + ": ")) << socket.error().message();
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 5s);
  listener = Fd();
  fillers.clear();
  auto refused = metadata::Socket::connect("127.0.0.1", port, Clock::now() + 2s, where);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Errc::ConnectionRefused) << refused.error().describe();
  EXPECT_TRUE(refused.error().message().starts_with(where + ": ")) << refused.error().message();
}

TEST(MetadataUrl, BadUrlsAndOptionsAreRefused) {
  for (const char* url : {"", "nothing", "ftp://127.0.0.1:1", "redis://:1", "builtin://127.0.0.1",
                          "redis://127.0.0.1:99999", "etcd://127.0.0.1:x"}) {
    auto store = open_metadata(url);
    ASSERT_FALSE(store) << url;
    EXPECT_TRUE(store.error().code() == Errc::InvalidArgument || store.error().code() == Errc::NotSupported)
        << url;
  }
  MetadataOptions options;
  options.renew_interval = options.ttl;
  auto store = open_metadata("redis://127.0.0.1:1", options);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message().find("renew_interval"), std::string::npos);
}

#ifdef RDMAKIT_METADATA_TOOL
// `rdmakit-metadata serve` is a builtin server another process reaches; `get` and `list` read it.
TEST(MetadataTool, ServesAndReads) {
  TempDir dir;
  auto server =
      Process::spawn({RDMAKIT_METADATA_TOOL, "serve", "127.0.0.1:0"}, dir.path() + "/serve.log", true);
  auto url = server.read_line(10s);
  ASSERT_TRUE(url && url->starts_with("builtin://127.0.0.1:")) << (url ? *url : "no URL printed");
  auto owner = open_metadata(*url, test_options("builtin", "tool"));
  ASSERT_TRUE(owner) << owner.error().describe();
  ASSERT_TRUE((*owner)->publish("segment", bytes("descriptor\n")));
  auto get =
      Process::spawn({RDMAKIT_METADATA_TOOL, "get", *url, "tool", "segment"}, dir.path() + "/get.log", true);
  EXPECT_EQ(get.read_line(10s), "descriptor");
  auto list = Process::spawn({RDMAKIT_METADATA_TOOL, "list", *url, "tool"}, dir.path() + "/list.log", true);
  EXPECT_EQ(list.read_line(10s), "segment");
}
#endif

INSTANTIATE_TEST_SUITE_P(Backends, MetadataTest, ::testing::Values("builtin", "redis", "etcd"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdmakit::xfer::testing
