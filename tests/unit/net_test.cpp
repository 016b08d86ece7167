// The one address helper (core/net.hpp): the forms every layer accepts, and connects bounded by a deadline,
// including the bootstrap store client's against a listener that never answers.
#include "core/net.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <vector>

#include "rdmakit/bootstrap.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(Net, ParsesEveryAddressForm) {
  struct Case {
    const char* text;
    const char* host;
    std::uint16_t port;
  };
  for (const Case& c :
       {Case{"10.0.0.1:80", "10.0.0.1", 80}, Case{"[::1]:65535", "::1", 65535}, Case{":0", "", 0},
        Case{"4242", "", 4242}, Case{"node-1.example:7", "node-1.example", 7}}) {
    auto parsed = net::parse_host_port(c.text);
    ASSERT_TRUE(parsed.has_value()) << c.text << ": " << parsed.error().describe();
    EXPECT_EQ(parsed->host, c.host) << c.text;
    EXPECT_EQ(parsed->port, c.port) << c.text;
  }
  for (const char* bad : {"host:", "host:65536", "host:-1", "host:+1", "[::1]80", "[::1", "", "a:b"}) {
    auto parsed = net::parse_host_port(bad);
    ASSERT_FALSE(parsed.has_value()) << bad;
    EXPECT_EQ(parsed.error().code(), Errc::InvalidArgument);
    EXPECT_NE(parsed.error().message().find(std::string("'") + bad + "'"), std::string::npos)
        << parsed.error().message();
  }
}

TEST(Net, ResolvesWithADefaultHostAndPrintsBack) {
  auto address = net::resolve(":1234", "127.0.0.1");
  ASSERT_TRUE(address.has_value()) << address.error().describe();
  EXPECT_EQ(net::to_string(*address), "127.0.0.1:1234");
  auto v6 = net::resolve("[::1]:5", "127.0.0.1");
  ASSERT_TRUE(v6.has_value()) << v6.error().describe();
  EXPECT_EQ(net::to_string(*v6), "[::1]:5");
}

// A loopback listener whose accept queue is full: further SYNs are dropped, so a connect neither succeeds
// nor is refused, the case only a deadline ends.
struct FullListener {
  Fd listener;
  std::vector<Fd> queued;
  std::uint16_t port = 0;
  FullListener() {
    listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(::listen(listener.get(), 0), 0);
    EXPECT_EQ(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
    port = ntohs(address.sin_port);
    auto target = net::resolve("127.0.0.1", port).value();
    for (int i = 0; i < 4; ++i) {  // fill the queue; these complete or hang, we keep them either way
      Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      (void)::connect(fd.get(), target.get(), target.length);
      queued.push_back(std::move(fd));
    }
  }
};

TEST(Net, ConnectEndsAtItsDeadline) {
  FullListener full;
  auto target = net::resolve("127.0.0.1", full.port).value();
  auto start = Clock::now();
  auto connected = net::connect(target, start + 300ms);
  auto took = Clock::now() - start;
  ASSERT_FALSE(connected.has_value()) << "the full listener accepted a connection";
  EXPECT_EQ(connected.error().code(), Errc::Timeout) << connected.error().describe();
  EXPECT_LT(took, 5s);
}

TEST(Net, NobodyListeningIsConnectionRefused) {
  Fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(getsockname(probe.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  auto target = net::resolve("127.0.0.1", ntohs(address.sin_port)).value();  // bound, not listening
  auto connected = net::connect(target, Clock::now() + 2s);
  ASSERT_FALSE(connected.has_value());
  EXPECT_EQ(connected.error().code(), Errc::ConnectionRefused) << connected.error().describe();
}

TEST(Net, StoreClientConnectHonoursItsTimeout) {
  FullListener full;
  auto start = Clock::now();
  auto store =
      bootstrap::TcpStore::open({.host = "127.0.0.1", .port = full.port, .timeout = 500ms, .secret = ""});
  auto took = Clock::now() - start;
  ASSERT_FALSE(store.has_value());
  EXPECT_EQ(store.error().code(), Errc::Timeout) << store.error().describe();
  EXPECT_LT(took, 5s) << "a blocking connect waited for the kernel's SYN retries";
}

}  // namespace
}  // namespace rdmakit
