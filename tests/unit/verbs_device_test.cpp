// The verbs transport on a real device (Soft-RoCE in the test VM; skipped where there is none):
// a loopback pair moving data with each verb, the registration cache, and the handshake's diagnostics
// (mismatched MTUs on the two sides, a peer nobody listens for).
//
// Environment: RDMAKIT_DEVICE (client side), RDMAKIT_CONFORMANCE_SERVER_DEVICE (server side, default the
// same), RDMAKIT_CONFORMANCE_LISTEN (server address, default the device's own IPv4 address).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "rdmakit/rdmakit.hpp"
#include "rdmakit/verbs.hpp"

namespace rdmakit {
namespace {

using namespace std::chrono_literals;

Options base(bool server) {
  Options o{.transport = "verbs"};
  o.timeout = 2000ms;
  o.rnr_timeout = 200ms;
  if (server) {
    if (const char* d = std::getenv("RDMAKIT_CONFORMANCE_SERVER_DEVICE")) o.set("device", d);
    if (const char* l = std::getenv("RDMAKIT_CONFORMANCE_LISTEN")) o.listen_address = l;
  }
  return o;
}

std::shared_ptr<Context> open_or_skip(const Options& options) {
  auto c = Context::open(options);
  if (!c && c.error().code() == Errc::Unavailable) return nullptr;
  EXPECT_TRUE(c) << c.error().describe();
  return c ? *c : nullptr;
}

struct Pair {
  std::shared_ptr<Context> client_ctx, server_ctx;
  Result<std::shared_ptr<Connection>> client = fail(Errc::NotFound, "not connected");
  Result<std::shared_ptr<Connection>> server = fail(Errc::NotFound, "not accepted");
};

Pair connect(const Options& client_options, const Options& server_options) {
  Pair p;
  p.server_ctx = open_or_skip(server_options);
  p.client_ctx = open_or_skip(client_options);
  if (!p.server_ctx || !p.client_ctx) return p;
  auto listener = p.server_ctx->listen();
  EXPECT_TRUE(listener) << listener.error().describe();
  if (!listener) return p;
  std::thread acceptor([&] { p.server = (*listener)->accept(20000ms); });
  p.client = p.client_ctx->connect((*listener)->address());
  acceptor.join();
  return p;
}

#define SKIP_WITHOUT_DEVICE(pair) \
  if (!(pair).server_ctx || !(pair).client_ctx) GTEST_SKIP() << "no RDMA device (run in the Soft-RoCE VM)"

TEST(VerbsDevice, EveryVerbMovesData) {
  Pair p = connect(base(false), base(true));
  SKIP_WITHOUT_DEVICE(p);
  ASSERT_TRUE(p.client) << p.client.error().describe();
  ASSERT_TRUE(p.server) << p.server.error().describe();
  auto& client = **p.client;
  auto& server = **p.server;
  EXPECT_EQ(client.peer().epoch, p.server_ctx->identity().epoch);

  auto local = *p.client_ctx->allocate(1 << 20, Access::All);
  auto remote = *p.server_ctx->allocate(1 << 20, Access::All);
  std::memset(local->data(), 0x5a, 1 << 20);
  // WRITE (large, then small enough to go inline), READ back.
  auto done = client.wait(*client.write(local->slice(0, 1 << 20), remote->descriptor().at(0)), 10s);
  ASSERT_TRUE(done && done->ok()) << (done ? std::string(to_string(done->status)) : done.error().describe());
  EXPECT_EQ(static_cast<unsigned char*>(remote->data())[(1 << 20) - 1], 0x5a);
  std::memcpy(local->data(), "inline!", 8);
  done = client.wait(*client.write(local->slice(0, 8), remote->descriptor().at(64)), 10s);
  ASSERT_TRUE(done && done->ok());
  EXPECT_STREQ(static_cast<char*>(remote->data()) + 64, "inline!");
  done = client.wait(*client.read(local->slice(4096, 8), remote->descriptor().at(64)), 10s);
  ASSERT_TRUE(done && done->ok());
  EXPECT_STREQ(static_cast<char*>(local->data()) + 4096, "inline!");

  // Atomics on an aligned word.
  std::memset(remote->data(), 0, 8);
  done = client.wait(*client.fetch_add(local->slice(8192, 8), remote->descriptor().at(0), 5), 10s);
  ASSERT_TRUE(done && done->ok()) << (done ? std::string(to_string(done->status)) : "");
  done = client.wait(*client.compare_swap(local->slice(8192, 8), remote->descriptor().at(0), 5, 9), 10s);
  ASSERT_TRUE(done && done->ok());
  EXPECT_EQ(*reinterpret_cast<std::uint64_t*>(static_cast<char*>(local->data()) + 8192), 5u);
  EXPECT_EQ(*static_cast<std::uint64_t*>(remote->data()), 9u);

  // WRITE with immediate and SEND consume posted receives.
  auto recv1 = *server.post_recv(remote->slice(4096, 64));
  auto recv2 = *server.post_recv(remote->slice(8192, 64));
  ASSERT_TRUE(client.wait(*client.write_imm(local->slice(0, 16), remote->descriptor().at(128), 77), 10s));
  auto got = server.wait(recv1, 10s);
  ASSERT_TRUE(got && got->ok());
  EXPECT_EQ(got->opcode, Opcode::RecvWriteImm);
  EXPECT_EQ(got->imm, 77u);
  EXPECT_EQ(got->connection, server.number());
  ASSERT_TRUE(client.wait(*client.send_imm(local->slice(0, 32), 88), 10s));
  got = server.wait(recv2, 10s);
  ASSERT_TRUE(got && got->ok());
  EXPECT_EQ(got->opcode, Opcode::Recv);
  EXPECT_EQ(got->bytes, 32u);
  EXPECT_EQ(got->imm, 88u);

  // A chain of unsignaled writes closed by a signaled one: one post, one completion.
  std::array<WorkRequest, 40> chain;
  std::array<Segment, 40> segments;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    segments[i] = local->slice(i * 16, 16);
    chain[i] = WorkRequest{.opcode = Opcode::Write,
                           .local = std::span(&segments[i], 1),
                           .remote = remote->descriptor().at(65536 + i * 16),
                           .signaled = i + 1 == chain.size()};
  }
  auto first = client.post(chain);
  ASSERT_TRUE(first);
  done = client.wait(*first + chain.size() - 1, 10s);
  ASSERT_TRUE(done && done->ok());
  auto stats = client.stats();
  EXPECT_EQ(stats.outstanding, 0u);
  EXPECT_FALSE(stats.failed);

  // A bad rkey fails that op with RemoteAccess and breaks the connection (sticky).
  RemoteAddress bad = remote->descriptor().at(0);
  bad.rkey ^= 0x5500;
  done = client.wait(*client.write(local->slice(0, 64), bad), 10s);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, Status::RemoteAccess);
  // Behind the failure a post is accepted and completes Flushed (the RC rules, as on every transport).
  auto after = client.write(local->slice(0, 8), remote->descriptor().at(0));
  ASSERT_TRUE(after) << after.error().describe();
  auto flushed = client.wait(*after, 10s);
  ASSERT_TRUE(flushed);
  EXPECT_EQ(flushed->status, Status::Flushed);
}

TEST(VerbsDevice, RegistrationCacheReusesCoveringRegistrations) {
  auto context = open_or_skip(base(false));
  if (!context) GTEST_SKIP() << "no RDMA device";
  std::vector<std::byte> buffer(1 << 16);
  auto whole = *context->register_memory(buffer.data(), buffer.size(), Access::LocalWrite);
  auto part = *context->register_memory(buffer.data() + 4096, 4096, Access::LocalWrite);
  EXPECT_EQ(part->lkey(), whole->lkey());
  auto s = *verbs::registration_cache_stats(*context);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.pinned_bytes, buffer.size());
  whole.reset();
  part.reset();
  s = *verbs::registration_cache_stats(*context);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
}

TEST(VerbsDevice, MismatchedMtusAreADiagnosticNotAHang) {
  Options client = base(false), server = base(true);
  client.set("mtu", "512");
  server.set("mtu", "256");
  auto start = std::chrono::steady_clock::now();
  Pair p = connect(client, server);
  SKIP_WITHOUT_DEVICE(p);
  ASSERT_FALSE(p.client);
  ASSERT_FALSE(p.server);
  std::printf("client sees: %s\nserver sees: %s\n", p.client.error().describe().c_str(),
              p.server.error().describe().c_str());
  EXPECT_EQ(p.client.error().code(), Errc::ConnectionRefused);
  EXPECT_NE(p.client.error().message().find("mtu mismatch"), std::string::npos);
  EXPECT_NE(p.client.error().message().find("512"), std::string::npos);
  EXPECT_NE(p.client.error().message().find("256"), std::string::npos);
  EXPECT_NE(p.server.error().message().find("mtu mismatch"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
}

TEST(VerbsDevice, NobodyListeningIsRefusedQuickly) {
  auto context = open_or_skip(base(false));
  if (!context) GTEST_SKIP() << "no RDMA device";
  auto listener = *context->listen();
  std::string address = listener->address();
  listener.reset();  // the port is free again: nobody listens there
  auto c = context->connect(address);
  ASSERT_FALSE(c);
  std::printf("connect to a closed port: %s\n", c.error().describe().c_str());
  EXPECT_TRUE(c.error().code() == Errc::ConnectionRefused || c.error().code() == Errc::Timeout);
}

}  // namespace
}  // namespace rdmakit
