// rdmakit-metadata: the transfer engine's metadata from the command line (docs/xfer.md, "Metadata").
//
//   rdmakit-metadata serve [host:port]          run a builtin metadata server (default 127.0.0.1:0) until
//                                              SIGINT/SIGTERM; prints its URL first
//   rdmakit-metadata list URL [namespace]       every key of the namespace (default "rdmakit")
//   rdmakit-metadata get URL namespace key      one value, as it is (bytes to stdout)
// The builtin server and its clients prove RDMAKIT_JOB_SECRET when it is set.
#include <signal.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "rdmakit/xfer/metadata.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: rdmakit-metadata serve [host:port]\n"
               "       rdmakit-metadata list URL [namespace]\n"
               "       rdmakit-metadata get URL namespace key\n");
  return 2;
}

int failed(const rdmakit::Error& error) {
  std::fprintf(stderr, "rdmakit-metadata: %s\n", error.describe().c_str());
  return 1;
}

int serve(std::string_view address) {
  // Blocked before the server's thread starts, so only sigwait() below sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto server = rdmakit::xfer::serve_builtin_metadata(address);
  if (!server) return failed(server.error());
  std::printf("%s\n", (*server)->url().c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  return 0;
}

rdmakit::Result<std::unique_ptr<rdmakit::xfer::MetadataStore>> open(const char* url, const char* name_space) {
  rdmakit::xfer::MetadataOptions options;
  options.name_space = name_space;
  return rdmakit::xfer::open_metadata(url, options);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string_view command = argv[1];
  if (command == "serve" && argc <= 3) return serve(argc == 3 ? argv[2] : "127.0.0.1:0");
  if (command == "list" && (argc == 3 || argc == 4)) {
    auto store = open(argv[2], argc == 4 ? argv[3] : "rdmakit");
    if (!store) return failed(store.error());
    auto keys = (*store)->list();
    if (!keys) return failed(keys.error());
    for (const auto& key : *keys) std::printf("%s\n", key.c_str());
    return 0;
  }
  if (command == "get" && argc == 5) {
    auto store = open(argv[2], argv[3]);
    if (!store) return failed(store.error());
    auto value = (*store)->lookup(argv[4]);
    if (!value) return failed(value.error());
    if (!*value) {
      std::fprintf(stderr, "rdmakit-metadata: no key '%s' in namespace '%s'\n", argv[4], argv[3]);
      return 1;
    }
    std::fwrite((*value)->data(), 1, (*value)->size(), stdout);
    return 0;
  }
  return usage();
}
