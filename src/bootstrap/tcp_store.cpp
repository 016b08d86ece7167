// The client half of the rendezvous store, and open_store() for a detected launch.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "bootstrap/auth.hpp"
#include "bootstrap/options.hpp"
#include "bootstrap/store_server.hpp"
#include "bootstrap/store_wire.hpp"
#include "core/log.hpp"
#include "core/net.hpp"
#include "rdmakit/bootstrap.hpp"

namespace rdmakit::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;

// One attempt, bounded by `deadline` (a store host that drops SYNs must not hold us past it). The socket
// is made blocking again: the client's protocol waits with poll() where it needs a bound.
Result<Fd> try_connect(const std::string& host, std::uint16_t port, Clock::time_point deadline) {
  auto address = net::resolve(host, port, AF_INET);
  if (!address) return fail(Errc::InvalidArgument, "store: " + address.error().message());
  auto fd = net::connect(*address, deadline);
  if (!fd) return std::unexpected(Error(fd.error().code(), "store: " + fd.error().message()));
  int flags = fcntl(fd->get(), F_GETFL);
  if (flags < 0 || fcntl(fd->get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    return fail_errno("store: fcntl", errno);
  int one = 1;
  setsockopt(fd->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

class TcpStoreClient final : public TcpStore {
 public:
  TcpStoreClient(std::unique_ptr<StoreServer> server, Fd socket, std::uint16_t port, std::string where)
      : server_(std::move(server)), socket_(std::move(socket)), port_(port), where_(std::move(where)) {}

  std::uint16_t bound_port() const noexcept override { return port_; }

  // Proves the job secret to the server and checks the server's proof back (store_wire.hpp).
  Result<void> authenticate(const std::string& secret) {
    auto nonce = auth::fresh_nonce();
    if (!nonce) return std::unexpected(nonce.error());
    std::string hello(wire::kHelloMagic);
    hello += auth::bytes(*nonce);
    if (auto ok = send_all(hello); !ok) return ok;
    auto challenge = receive_reply(wire::kProofSize);
    if (!challenge) return std::unexpected(challenge.error());
    if (challenge->size() != wire::kProofSize)
      return std::unexpected(protocol_error("a malformed challenge"));
    auto proof = auth::mac(secret, {wire::kMacLabel, "client", auth::bytes(*nonce), *challenge});
    if (auto ok = send_all(std::string(reinterpret_cast<const char*>(proof.data()), proof.size())); !ok)
      return ok;
    auto answer = receive_reply(wire::kProofSize);
    if (!answer) return std::unexpected(answer.error());
    auto expected = auth::mac(secret, {wire::kMacLabel, "server", auth::bytes(*nonce), *challenge});
    if (!auth::verify(expected,
                      std::span(reinterpret_cast<const std::uint8_t*>(answer->data()), answer->size())))
      return fail(Errc::ConnectionRefused,
                  "store at " + where_ +
                      ": the server does not know the job secret (RDMAKIT_JOB_SECRET "
                      "must be the same on every rank)");
    return {};
  }

  Result<void> set(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mutex_);
    if (auto ok = send_all(wire::request(wire::kSet, key, value)); !ok) return ok;
    auto reply = receive_reply(0);
    if (!reply) return std::unexpected(reply.error());
    return {};
  }

  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::microseconds(200);
    for (;;) {
      auto value = try_get(key);
      if (!value) return std::unexpected(value.error());
      if (*value) return std::move(**value);
      if (Clock::now() >= deadline)
        return fail(Errc::Timeout, "store: key '" + std::string(key) + "' was not set within " +
                                       std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  }

 private:
  Result<std::optional<std::string>> try_get(std::string_view key) {
    std::lock_guard lock(mutex_);
    if (auto ok = send_all(wire::request(wire::kGet, key, {})); !ok) return std::unexpected(ok.error());
    bool found = true;
    auto value = receive_reply(std::numeric_limits<std::uint32_t>::max(), &found);
    if (!value) return std::unexpected(value.error());
    if (!found) return std::nullopt;
    return std::move(*value);
  }

  Error protocol_error(const std::string& what) const {
    return Error(Errc::ProtocolError, "store at " + where_ + ": " + what);
  }

  // One reply: its payload when Ok; `found` = false for NotFound (only where the caller allows it); an
  // error carrying the server's message for Error. The store refuses with ConnectionRefused before the
  // handshake completed, so a wrong secret reads as what it is.
  Result<std::string> receive_reply(std::size_t max_payload, bool* found = nullptr) {
    std::string header;
    if (auto ok = receive(wire::kReplyHeaderSize, header); !ok) return std::unexpected(ok.error());
    auto status = static_cast<std::uint8_t>(header[0]);
    std::uint32_t length = wire::get_u32(header.data() + 1);
    bool error = status == wire::kError;
    if (status > wire::kError || (status == wire::kNotFound && !found) || (!error && length > max_payload) ||
        (error && length > 4096))
      return std::unexpected(protocol_error("a malformed reply"));
    std::string payload;
    if (auto ok = receive(length, payload); !ok) return std::unexpected(ok.error());
    if (error) {
      auto code = payload.empty() ? 0 : static_cast<std::uint8_t>(payload[0]);
      if (code < static_cast<std::uint8_t>(Errc::InvalidArgument) ||
          code > static_cast<std::uint8_t>(Errc::TransportFailure))
        return std::unexpected(protocol_error("a malformed error reply"));
      return fail(static_cast<Errc>(code), "store at " + where_ + " refused: " + payload.substr(1));
    }
    if (found) *found = status == wire::kOk;
    return payload;
  }

  Result<void> send_all(const std::string& data) {
    std::size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::send(socket_.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return fail(Errc::ConnectionBroken, "store at " + where_ + ": send failed: " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

  // Replies come fast or the server is gone; a bounded wait keeps a dead server from hanging us.
  Result<void> receive(std::size_t length, std::string& out) {
    out.resize(length);
    std::size_t done = 0;
    while (done < length) {
      pollfd p{socket_.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, 30000);
      if (ready == 0) return fail(Errc::Timeout, "store at " + where_ + ": no reply within 30 s");
      ssize_t n = ready > 0 ? ::recv(socket_.get(), out.data() + done, length - done, 0) : -1;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return fail(Errc::ConnectionBroken,
                    "store at " + where_ + ": the store (rank 0) closed the connection");
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

  std::unique_ptr<StoreServer> server_;  // rank 0 only; outlives the socket below
  Fd socket_;
  std::uint16_t port_;
  std::string where_;
  std::mutex mutex_;
};

// The key clients prove: the one given in code, else auth::service_secret for the store's host (the job
// secret; on loopback the per-user secret; beyond loopback an error unless insecure). An empty secret
// given in code still needs loopback or insecure: it authenticates nobody.
Result<std::string> store_secret(const StoreOptions& options) {
  if (options.secret && !options.secret->empty()) return auth::job_secret(*options.secret);
  if (!options.secret) return auth::service_secret(options.host, "the rendezvous store");
  if (auth::is_loopback_host(options.host)) return std::string();
  auto config = resolve_bootstrap_options();
  if (!config) return std::unexpected(config.error());
  if (!config->insecure)
    return fail(Errc::InvalidArgument,
                "store at " + options.host +
                    ": an empty secret beyond loopback authenticates nobody: set a job "
                    "secret (option job_secret) or option insecure");
  return std::string();
}

}  // namespace

// Out of line: the destructor is the key function, so the vtable is emitted (and exported) from this one
// file in every build type, not wherever an optimizer happens to keep it (abi/librdmakit.symbols).
Store::~Store() = default;
TcpStore::~TcpStore() = default;

Result<std::shared_ptr<TcpStore>> TcpStore::open(const StoreOptions& options) {
  auto secret = store_secret(options);
  if (!secret) return std::unexpected(secret.error());
  std::unique_ptr<StoreServer> server;
  std::uint16_t port = options.port;
  std::string host = options.host;
  if (options.is_server) {
    auto limits = store_limits();
    if (!limits) return std::unexpected(limits.error());
    auto started = StoreServer::start(options.host, options.port, *secret, *limits);
    if (!started)
      return std::unexpected(Error(started.error().code(), "bootstrap: rank 0 cannot host the store at " +
                                                               options.host + ":" + std::to_string(port) +
                                                               ": " + started.error().message()));
    server = std::move(*started);
    port = server->port();
  }
  std::string where = host + ":" + std::to_string(port);
  auto deadline = Clock::now() + options.timeout;
  for (;;) {  // rank 0 may start after us: retry until the deadline
    auto socket = try_connect(host, port, deadline);
    if (socket) {
      auto client = std::make_shared<TcpStoreClient>(std::move(server), std::move(*socket), port, where);
      if (auto ok = client->authenticate(*secret); !ok) return std::unexpected(ok.error());
      return client;
    }
    if (socket.error().code() == Errc::InvalidArgument) return std::unexpected(socket.error());
    if (Clock::now() >= deadline)
      return fail(Errc::Timeout, "bootstrap: could not reach the rendezvous store at " + where + " within " +
                                     std::to_string(options.timeout.count()) + " ms (is rank 0 running? " +
                                     socket.error().message() + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<std::shared_ptr<Store>> open_store(const LaunchInfo& launch, std::chrono::milliseconds timeout) {
  if (launch.world_size == 1 && launch.launcher == "single") return make_memory_store();
  auto job = auth::job_secret();
  if (!job) return std::unexpected(job.error());
  std::string host = launch.store_host;
  // Without a job secret a one-host launch keeps the store on loopback, proven with the per-user secret;
  // a launch across hosts needs the job secret (or option insecure): service_secret decides.
  if (job->empty() && !launch.spans_hosts()) host = "127.0.0.1";
  auto secret = auth::service_secret(host, "the rendezvous store", *job);
  if (!secret) return std::unexpected(secret.error());
  auto store = TcpStore::open(StoreOptions{.host = host,
                                           .port = launch.store_port,
                                           .is_server = launch.rank == 0,
                                           .timeout = timeout,
                                           .secret = *secret});
  if (!store) return std::unexpected(store.error());
  return std::shared_ptr<Store>(std::move(*store));
}

}  // namespace rdmakit::bootstrap
