// Physical ceilings for bench/: a plain TCP stream, a plain TCP 8-byte ping-pong (both over loopback, the
// same socket options rdmakit's tcp transport uses: TCP_NODELAY) and a one-core memcpy. Our own code,
// deliberately the simplest thing: what a transport on these sockets could at best reach.
//
//   baseline tcp-server PORT                 serves one stream or ping-pong client, then exits
//   baseline tcp-stream HOST PORT SIZE SECS  prints bytes/s of SIZE-byte send() calls for SECS seconds
//   baseline tcp-pingpong HOST PORT SIZE N   prints the median half round trip in microseconds
//   baseline tcp-pingpong-spin HOST PORT SIZE N   the same with both sides spinning on non-blocking recv
//                                            (the floor of a busy-polling transport over TCP)
//   baseline memcpy SIZE SECS                prints bytes/s of memcpy between two SIZE buffers
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int die(const char* what) {
  std::perror(what);
  std::exit(1);
}

void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// spin: non-blocking reads in a loop, as a polling transport reads, instead of sleeping in recv.
bool read_full(int fd, void* data, std::size_t n, bool spin = false) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t got = ::recv(fd, p, n, spin ? MSG_DONTWAIT : 0);
    if (got < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got <= 0) return false;
    p += got, n -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_full(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    p += sent, n -= static_cast<std::size_t>(sent);
  }
  return true;
}

// Header: mode (0 stream, 1 ping-pong, 2 spinning ping-pong) and message size.
struct Hello {
  std::uint32_t mode;
  std::uint32_t size;
};

int serve(int port) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("bind");
  listen(listener, 1);
  int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) die("accept");
  nodelay(fd);
  Hello hello{};
  if (!read_full(fd, &hello, sizeof(hello))) return 1;
  std::vector<char> buffer(std::max<std::size_t>(hello.size, 1 << 20));
  if (hello.mode == 0) {
    std::uint64_t total = 0;
    for (ssize_t got; (got = ::recv(fd, buffer.data(), buffer.size(), 0)) > 0;)
      total += static_cast<std::uint64_t>(got);
    std::fprintf(stderr, "received %llu bytes\n", static_cast<unsigned long long>(total));
  } else {
    const bool spin = hello.mode == 2;
    while (read_full(fd, buffer.data(), hello.size, spin) && write_full(fd, buffer.data(), hello.size)) {
    }
  }
  close(fd);
  close(listener);
  return 0;
}

int connect_to(const char* host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, host, &addr.sin_addr);
  for (int attempt = 0; connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0; ++attempt) {
    if (attempt > 100) die("connect");
    usleep(20000);
  }
  nodelay(fd);
  return fd;
}

int stream(const char* host, int port, std::uint32_t size, double seconds) {
  int fd = connect_to(host, port);
  Hello hello{0, size};
  write_full(fd, &hello, sizeof(hello));
  std::vector<char> buffer(size, 'x');
  std::uint64_t total = 0;
  auto start = Clock::now();
  auto until = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    if (!write_full(fd, buffer.data(), size)) die("send");
    total += size;
  }
  shutdown(fd, SHUT_WR);
  char byte;
  (void)::recv(fd, &byte, 1, 0);  // the server closes after reading everything: the bytes have arrived
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%.0f\n", static_cast<double>(total) / elapsed);
  close(fd);
  return 0;
}

int pingpong(const char* host, int port, std::uint32_t size, int rounds, bool spin) {
  int fd = connect_to(host, port);
  Hello hello{spin ? 2u : 1u, size};
  write_full(fd, &hello, sizeof(hello));
  std::vector<char> buffer(size, 'x');
  std::vector<double> half_us;
  for (int i = 0; i < rounds + 100; ++i) {
    auto t0 = Clock::now();
    if (!write_full(fd, buffer.data(), size) || !read_full(fd, buffer.data(), size, spin)) die("pingpong");
    if (i >= 100) half_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
  }
  std::sort(half_us.begin(), half_us.end());
  std::printf("%.3f\n", half_us[half_us.size() / 2]);
  close(fd);
  return 0;
}

int copy(std::size_t size, double seconds) {
  // Rotate over enough buffers to leave the caches (>= 64 MiB in all) unless one pair is already larger.
  std::size_t pairs = std::max<std::size_t>(1, (64u << 20) / size);
  std::vector<std::vector<char>> from(pairs, std::vector<char>(size, 'a')),
      to(pairs, std::vector<char>(size, 'b'));
  std::uint64_t total = 0;
  auto start = Clock::now();
  auto until = start + std::chrono::duration<double>(seconds);
  for (std::size_t i = 0; Clock::now() < until; i = (i + 1) % pairs) {
    std::memcpy(to[i].data(), from[i].data(), size);
    total += size;
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%.0f\n", static_cast<double>(total) / elapsed);
  return to[0][0] == 'a' ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "tcp-server" && argc == 3) return serve(std::atoi(argv[2]));
  if (mode == "tcp-stream" && argc == 6)
    return stream(argv[2], std::atoi(argv[3]), static_cast<std::uint32_t>(std::atol(argv[4])),
                  std::atof(argv[5]));
  if ((mode == "tcp-pingpong" || mode == "tcp-pingpong-spin") && argc == 6)
    return pingpong(argv[2], std::atoi(argv[3]), static_cast<std::uint32_t>(std::atol(argv[4])),
                    std::atoi(argv[5]), mode == "tcp-pingpong-spin");
  if (mode == "memcpy" && argc == 4)
    return copy(static_cast<std::size_t>(std::atol(argv[2])), std::atof(argv[3]));
  std::fprintf(stderr, "usage: see the comment at the top of bench/baseline.cpp\n");
  return 2;
}
