// A second process for the conformance suite: opens a context, publishes a 64 MiB region and the address
// to connect to on stdout ("READY <address> <descriptor-hex>"), accepts one connection and then only waits
// (its CPU is not needed for one-sided operations) until stdin closes or it is killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "rdmakit/rdmakit.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: conformance_peer <transport> [listen-address]\n");
    return 2;
  }
  rdmakit::Options options{.transport = argv[1], .name = "conformance-peer"};
  // The peer plays the server: on two devices it sits on the server's device.
  if (const char* device = std::getenv("RDMAKIT_CONFORMANCE_SERVER_DEVICE")) options.set("device", device);
  auto context = rdmakit::Context::open(options);
  if (!context) return std::fprintf(stderr, "peer: %s\n", context.error().describe().c_str()), 1;
  using rdmakit::Access;
  auto memory = (*context)->allocate(
      64 << 20, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic);
  if (!memory) return std::fprintf(stderr, "peer: %s\n", memory.error().describe().c_str()), 1;
  auto listener = (*context)->listen(argc > 2 ? argv[2] : "");
  if (!listener) return std::fprintf(stderr, "peer: %s\n", listener.error().describe().c_str()), 1;
  std::printf("READY %s %s\n", (*listener)->address().c_str(), (*memory)->descriptor().to_hex().c_str());
  std::fflush(stdout);
  auto connection = (*listener)->accept(std::chrono::seconds(60));
  if (!connection) return std::fprintf(stderr, "peer: %s\n", connection.error().describe().c_str()), 1;
  char byte;
  while (read(0, &byte, 1) > 0) {
  }
  return 0;
}
