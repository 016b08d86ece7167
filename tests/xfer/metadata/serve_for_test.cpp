// xfer_metadata_server builtin|redis|etcd: starts one metadata server for a test script (servers.hpp: a real
// redis-server or etcd on a free loopback port, its data in a temporary directory), prints its URL, and
// runs until SIGTERM/SIGINT or until its parent dies; then the server is stopped and its data removed.
// Exits 1 naming the missing program when the backend's server is not installed.
#include <signal.h>
#include <sys/prctl.h>

#include <cstdio>
#include <exception>
#include <string>

#include "servers.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: xfer_metadata_server builtin|redis|etcd\n"), 2;
  std::string backend = argv[1];
  if (backend != "builtin" && backend != "redis" && backend != "etcd") {
    return std::fprintf(stderr, "xfer_metadata_server: unknown backend %s\n", backend.c_str()), 2;
  }
  // Blocked before any thread starts, so only sigwait() sees them; the parent's death is one of them, so a
  // script killed outright does not leave a server behind.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  try {
    std::string why;
    auto server = rdmakit::xfer::testing::make_server(backend, why);
    if (!server) return std::fprintf(stderr, "xfer_metadata_server: %s\n", why.c_str()), 1;
    std::printf("%s\n", server->url().c_str());
    std::fflush(stdout);
    int signal = 0;
    sigwait(&stop, &signal);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xfer_metadata_server: %s\n", e.what());
    return 1;
  }
}
