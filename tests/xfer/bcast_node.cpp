// One node of the weights broadcast chain, for tests/xfer/broadcast.sh and the netns test:
//   bcast_node <metadata dir> <session> <rank> <receivers> <bytes> <transport> [listen address]
// rank 0 is the sender (fills a seeded pattern); ranks 1..N receive, forward, and check every byte
// (pattern and checksum) on arrival. Prints "rank R ok <ms> ms" and exits 0 only when the bytes are right.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rdmakit/rdmakit.hpp"
#include "rdmakit/xfer/broadcast.hpp"
#include "xfer/file_metadata.hpp"

namespace {

std::uint8_t pattern_byte(std::uint64_t i) { return static_cast<std::uint8_t>((i * 2654435761u) >> 13); }

std::uint64_t checksum(const std::uint8_t* data, std::uint64_t size) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(
        stderr,
        "usage: bcast_node <metadata dir> <session> <rank> <receivers> <bytes> <transport> [listen]\n");
    return 2;
  }
  rdmakit::xfer::testing::FileMetadataStore metadata(argv[1]);
  rdmakit::xfer::BroadcastOptions options{.session = argv[2],
                                          .receivers = static_cast<std::uint32_t>(std::atoi(argv[4])),
                                          .size = std::strtoull(argv[5], nullptr, 10),
                                          .listen_address = argc > 7 ? argv[7] : ""};
  auto rank = static_cast<std::uint32_t>(std::atoi(argv[3]));
  auto context = rdmakit::Context::open({.transport = argv[6], .name = "bcast-" + std::to_string(rank)});
  if (!context) return std::fprintf(stderr, "%s\n", context.error().describe().c_str()), 1;
  auto region =
      (*context)->allocate(options.size, rdmakit::Access::LocalWrite | rdmakit::Access::RemoteWrite);
  if (!region) return std::fprintf(stderr, "%s\n", region.error().describe().c_str()), 1;
  auto* bytes = static_cast<std::uint8_t*>((*region)->data());
  std::uint64_t expected = 0;
  {
    std::vector<std::uint8_t> reference(options.size);
    for (std::uint64_t i = 0; i < options.size; ++i) reference[i] = pattern_byte(i);
    expected = checksum(reference.data(), options.size);
    if (rank == 0) std::copy(reference.begin(), reference.end(), bytes);
  }
  auto result = rank == 0 ? rdmakit::xfer::broadcast_send(**context, metadata, **region, options)
                          : rdmakit::xfer::broadcast_receive(**context, metadata, **region, rank, options);
  if (!result) return std::fprintf(stderr, "rank %u: %s\n", rank, result.error().describe().c_str()), 1;
  if (rank != 0) {
    for (std::uint64_t i = 0; i < options.size; ++i) {
      if (bytes[i] != pattern_byte(i))
        return std::fprintf(stderr, "rank %u: byte %llu wrong\n", rank, (unsigned long long)i), 1;
    }
    if (checksum(bytes, options.size) != expected)
      return std::fprintf(stderr, "rank %u: checksum wrong\n", rank), 1;
  }
  std::printf("rank %u ok %.1f ms (%llu chunks)\n", rank,
              std::chrono::duration<double, std::milli>(result->elapsed).count(),
              (unsigned long long)result->chunks);
  return 0;
}
