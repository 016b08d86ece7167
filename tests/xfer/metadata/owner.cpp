// A publisher for the tests' "owner dies" cases: opens the store, publishes one key, says "ready" and
// waits to be killed (SIGKILL: no close, no unpublish; only the TTL can remove its key). Meanwhile it
// prints "replaced KEY" once its renewal finds that another publisher replaced the key.
//   xfer_metadata_owner URL NAMESPACE KEY VALUE TTL_MS RENEW_MS
#include <unistd.h>

#include <cstdio>
#include <string>

#include "rdmakit/xfer/metadata.hpp"

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s URL NAMESPACE KEY VALUE TTL_MS RENEW_MS\n", argv[0]);
    return 2;
  }
  rdmakit::xfer::MetadataOptions options;
  options.name_space = argv[2];
  options.ttl = std::chrono::milliseconds(std::stol(argv[5]));
  options.renew_interval = std::chrono::milliseconds(std::stol(argv[6]));
  auto store = rdmakit::xfer::open_metadata(argv[1], options);
  if (!store) {
    std::fprintf(stderr, "owner: %s\n", store.error().describe().c_str());
    return 1;
  }
  std::string value = argv[4];
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(value.data()),
                               reinterpret_cast<const std::byte*>(value.data()) + value.size());
  if (auto ok = (*store)->publish(argv[3], bytes); !ok) {
    std::fprintf(stderr, "owner: %s\n", ok.error().describe().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (bool told = false;; ::usleep(20000)) {
    auto replaced = (*store)->replaced();
    if (told || replaced.empty()) continue;
    std::printf("replaced %s\n", replaced.front().c_str());
    std::fflush(stdout);
    told = true;
  }
}
