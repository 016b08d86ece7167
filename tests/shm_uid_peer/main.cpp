// A process of another uid for unit_shm_cross_uid (started through setpriv --reuid). Modes:
//   connect <address>  connect to an shm listener; prints "CONNECTED" or "REFUSED <message>"
//   raw <address>      connect a bare socket, send nothing, report what the listener sends within 2 s:
//                      "GOT <bytes> <descriptors>" or "GOT EOF" (to check nothing about it was sent)
//   listen <name>      listen on an shm name, print "READY <address>", report the accept():
//                      "ACCEPTED" or "ACCEPT-FAILED <message>"
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "rdmakit/rdmakit.hpp"

namespace {

int connect_mode(rdmakit::Context& context, const char* address) {
  auto connection = context.connect(address);
  if (connection) return std::printf("CONNECTED\n"), 0;
  std::printf("REFUSED %s\n", connection.error().describe().c_str());
  return 3;
}

int raw_mode(const char* address) {
  std::string name = std::string(address).substr(4);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  bool abstract = name.front() != '/';
  std::memcpy(sa.sun_path + (abstract ? 1 : 0), name.data(), name.size());
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), length) != 0)
    return std::printf("CONNECT-FAILED %s\n", std::strerror(errno)), 3;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 2000) <= 0) return std::printf("GOT NOTHING\n"), 0;
  char bytes[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
  iovec iov{bytes, sizeof(bytes)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got = ::recvmsg(fd, &msg, 0);
  if (got <= 0) return std::printf("GOT EOF\n"), 0;
  std::size_t fds = 0;
  for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h))
    if (h->cmsg_type == SCM_RIGHTS) fds += (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
  return std::printf("GOT %zd %zu\n", got, fds), 0;
}

int listen_mode(rdmakit::Context& context, const char* name) {
  auto listener = context.listen(name);
  if (!listener) return std::printf("LISTEN-FAILED %s\n", listener.error().describe().c_str()), 1;
  std::printf("READY %s\n", (*listener)->address().c_str());
  std::fflush(stdout);
  auto connection = (*listener)->accept(std::chrono::seconds(2));
  if (connection) return std::printf("ACCEPTED\n"), 0;
  std::printf("ACCEPT-FAILED %s\n", connection.error().describe().c_str());
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: shm_uid_peer connect|raw|listen <address>\n"), 2;
  std::string mode = argv[1];
  if (mode == "raw") return raw_mode(argv[2]);
  auto context = rdmakit::Context::open({.transport = "shm", .name = "shm-uid-peer", .log_level = "error"});
  if (!context) return std::printf("OPEN-FAILED %s\n", context.error().describe().c_str()), 1;
  int rc = mode == "connect" ? connect_mode(**context, argv[2]) : listen_mode(**context, argv[2]);
  std::fflush(stdout);
  return rc;
}
