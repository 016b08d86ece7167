// A segment owner in a process of its own, for the tests that kill one:
//   xfer_peer <metadata dir> <segment name> <bytes> <transport>
// ("default": the engine's default transports, to let the client choose)
// publishes a zeroed segment (or, when <bytes> is "file:<path>", that file as a file segment), prints
// "ready" and serves until stdin closes (or it is killed). Over verbs, on
// the owner's devices of RDMAKIT_TEST_XFER_VERBS_DEVICES (verbs_devices.hpp).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "rdmakit/xfer/engine.hpp"
#include "xfer/file_metadata.hpp"
#include "xfer/verbs_devices.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: xfer_peer <metadata dir> <segment> <bytes> <transport>\n");
    return 2;
  }
  rdmakit::xfer::testing::FileMetadataStore metadata(argv[1]);
  // The devices apply to a transport that picks one (verbs); the others ignore them.
  rdmakit::xfer::EngineOptions options{.transports = {argv[4]},
                                       .verbs_devices = rdmakit::xfer::testing::owner_verbs_devices()};
  if (std::string(argv[4]) == "default") options.transports = rdmakit::xfer::EngineOptions{}.transports;
  auto engine = rdmakit::xfer::Engine::create(metadata, options);
  if (!engine) {
    std::fprintf(stderr, "xfer_peer: %s\n", engine.error().describe().c_str());
    return 1;
  }
  const std::string bytes = argv[3];
  if (bytes.starts_with("file:")) {
    auto published = (*engine)->publish_file(argv[2], bytes.substr(5));
    if (!published) {
      std::fprintf(stderr, "xfer_peer: %s\n", published.error().describe().c_str());
      return 1;
    }
  } else {
    auto segment = (*engine)->allocate_segment(argv[2], std::strtoull(argv[3], nullptr, 10));
    if (!segment) {
      std::fprintf(stderr, "xfer_peer: %s\n", segment.error().describe().c_str());
      return 1;
    }
  }
  std::cout << "ready" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
