#include "bootstrap/store_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "bootstrap/store_wire.hpp"

namespace rdmakit::bootstrap {
namespace {

Result<sockaddr_in> resolve(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr)
    return fail(Errc::InvalidArgument, "store: cannot resolve '" + host + "': " + gai_strerror(rc));
  sockaddr_in addr;
  std::memcpy(&addr, found->ai_addr, sizeof(addr));
  freeaddrinfo(found);
  addr.sin_port = htons(port);
  return addr;
}

Result<Fd> bind_listener(const std::string& host, std::uint16_t port) {
  auto addr = resolve(host, port);
  if (!addr) return std::unexpected(addr.error());
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("store: socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    if (errno != EADDRNOTAVAIL) return fail_errno("store: bind " + host + ":" + std::to_string(port), errno);
    addr->sin_addr.s_addr = htonl(INADDR_ANY);  // MASTER_ADDR names this host some other way
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0)
      return fail_errno("store: bind *:" + std::to_string(port), errno);
  }
  if (::listen(fd.get(), 1024) != 0) return fail_errno("store: listen", errno);
  return fd;
}

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 1000) <= 0) return false;  // a client that does not read its replies is dropped
      continue;
    }
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& host, std::uint16_t port) {
  auto listener = bind_listener(host, port);
  if (!listener) return std::unexpected(listener.error());
  sockaddr_in bound{};
  socklen_t length = sizeof(bound);
  getsockname(listener->get(), reinterpret_cast<sockaddr*>(&bound), &length);
  Fd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return fail_errno("store: eventfd", errno);
  auto server = std::unique_ptr<StoreServer>(new StoreServer(std::move(*listener), std::move(stop), ntohs(bound.sin_port)));
  server->thread_ = std::thread([s = server.get()] { s->run(); });
  return server;
}

StoreServer::StoreServer(Fd listener, Fd stop, std::uint16_t port)
    : listener_(std::move(listener)), stop_(std::move(stop)), port_(port) {}

StoreServer::~StoreServer() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void StoreServer::run() {
  std::vector<Fd> clients;
  std::vector<std::string> buffers;
  for (;;) {
    std::vector<pollfd> fds{{stop_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    for (const Fd& c : clients) fds.push_back({c.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    for (std::size_t i = clients.size(); i-- > 0;) {
      if (!fds[i + 2].revents) continue;
      char chunk[65536];
      ssize_t n = ::recv(clients[i].get(), chunk, sizeof(chunk), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n > 0) buffers[i].append(chunk, static_cast<std::size_t>(n));
      if (n <= 0 || !serve(clients[i].get(), buffers[i])) {
        clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
        buffers.erase(buffers.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if (fds[1].revents & POLLIN) {
      Fd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (client) {
        int one = 1;
        setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        clients.push_back(std::move(client));
        buffers.emplace_back();
      }
    }
  }
}

bool StoreServer::serve(int fd, std::string& buffer) {
  while (buffer.size() >= wire::kHeaderSize) {
    auto op = static_cast<std::uint8_t>(buffer[0]);
    std::uint32_t key_length = wire::get_u32(buffer.data() + 1);
    std::uint32_t value_length = wire::get_u32(buffer.data() + 5);
    if (key_length > wire::kMaxField || value_length > wire::kMaxField) return false;
    std::size_t total = wire::kHeaderSize + key_length + value_length;
    if (buffer.size() < total) return true;
    std::string key = buffer.substr(wire::kHeaderSize, key_length);
    std::string reply;
    if (op == wire::kSet) {
      values_[key] = buffer.substr(wire::kHeaderSize + key_length, value_length);
      reply = std::string(1, '\1');
    } else if (op == wire::kGet) {
      auto it = values_.find(key);
      reply = std::string(1, it != values_.end() ? '\1' : '\0');
      wire::put_u32(reply, it != values_.end() ? static_cast<std::uint32_t>(it->second.size()) : 0);
      if (it != values_.end()) reply += it->second;
    } else {
      return false;
    }
    buffer.erase(0, total);
    if (!write_all(fd, reply)) return false;
  }
  return true;
}

}  // namespace rdmakit::bootstrap
