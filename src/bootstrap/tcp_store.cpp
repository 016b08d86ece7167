// The client half of the rendezvous store, and open_store() for a detected launch.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "bootstrap/store_server.hpp"
#include "bootstrap/store_wire.hpp"
#include "rdmakit/bootstrap.hpp"

namespace rdmakit::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;

Result<Fd> try_connect(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr)
    return fail(Errc::InvalidArgument, "store: cannot resolve '" + host + "': " + gai_strerror(rc));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int err = fd ? 0 : errno;
  if (fd && ::connect(fd.get(), found->ai_addr, found->ai_addrlen) != 0) err = errno;
  freeaddrinfo(found);
  if (err != 0) return fail_errno("store: connect " + host + ":" + std::to_string(port), err);
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

class TcpStoreClient final : public TcpStore {
 public:
  TcpStoreClient(std::unique_ptr<StoreServer> server, Fd socket, std::uint16_t port, std::string where)
      : server_(std::move(server)), socket_(std::move(socket)), port_(port), where_(std::move(where)) {}

  std::uint16_t bound_port() const noexcept override { return port_; }

  Result<void> set(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mutex_);
    if (auto ok = send_all(wire::request(wire::kSet, key, value)); !ok) return ok;
    std::string reply;
    return receive(1, reply);
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
    std::string header;
    if (auto ok = receive(5, header); !ok) return std::unexpected(ok.error());
    if (header[0] == '\0') return std::nullopt;
    std::string value;
    if (auto ok = receive(wire::get_u32(header.data() + 1), value); !ok) return std::unexpected(ok.error());
    return value;
  }

  Result<void> send_all(const std::string& data) {
    std::size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::send(socket_.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail(Errc::ConnectionBroken, "store at " + where_ + ": send failed: " + std::strerror(errno));
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
        return fail(Errc::ConnectionBroken, "store at " + where_ + ": the store (rank 0) closed the connection");
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

}  // namespace

Result<std::shared_ptr<TcpStore>> TcpStore::open(const StoreOptions& options) {
  std::unique_ptr<StoreServer> server;
  std::uint16_t port = options.port;
  std::string host = options.host;
  if (options.is_server) {
    auto started = StoreServer::start(options.host, options.port);
    if (!started)
      return std::unexpected(Error(started.error().code(), "bootstrap: rank 0 cannot host the store at " +
                                                               options.host + ":" + std::to_string(port) + ": " +
                                                               started.error().message()));
    server = std::move(*started);
    port = server->port();
  }
  std::string where = host + ":" + std::to_string(port);
  auto deadline = Clock::now() + options.timeout;
  for (;;) {  // rank 0 may start after us: retry until the deadline
    auto socket = try_connect(host, port);
    if (socket) return std::make_shared<TcpStoreClient>(std::move(server), std::move(*socket), port, where);
    if (socket.error().code() == Errc::InvalidArgument) return std::unexpected(socket.error());
    if (Clock::now() >= deadline)
      return fail(Errc::Timeout, "bootstrap: could not reach the rendezvous store at " + where + " within " +
                                     std::to_string(options.timeout.count()) +
                                     " ms (is rank 0 running? " + socket.error().message() + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<std::shared_ptr<Store>> open_store(const LaunchInfo& launch, std::chrono::milliseconds timeout) {
  if (launch.world_size == 1 && launch.launcher == "single") return make_memory_store();
  auto store = TcpStore::open(StoreOptions{.host = launch.store_host, .port = launch.store_port,
                                           .is_server = launch.rank == 0, .timeout = timeout});
  if (!store) return std::unexpected(store.error());
  return std::shared_ptr<Store>(std::move(*store));
}

}  // namespace rdmakit::bootstrap
