// The classic RDMA pair, client side: WRITE into the server's memory, READ it back, and bump a counter
// there with fetch-and-add. The server's CPU takes no part.
//
//   write_read_client <publish-file>     (the file write_read_server wrote)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "rdmakit/rdmakit.hpp"

namespace {
int fail(const char* what, const rdmakit::Error& error) {
  std::fprintf(stderr, "client: %s: %s\n", what, error.describe().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  using rdmakit::Access;
  if (argc < 2) return std::fprintf(stderr, "usage: write_read_client <publish-file>\n"), 2;
  std::string address, hex;
  std::ifstream(argv[1]) >> address >> hex;
  auto remote = rdmakit::RemoteRegion::from_hex(hex);
  if (!remote) return fail("descriptor", remote.error());

  auto context = rdmakit::Context::open();
  if (!context) return fail("open", context.error());
  auto connection = (*context)->connect(address);
  if (!connection) return fail("connect", connection.error());

  constexpr std::uint32_t kBytes = 64 * 1024;
  auto local = (*context)->allocate(2 * kBytes + 8, Access::LocalWrite);
  if (!local) return fail("allocate", local.error());
  auto* bytes = static_cast<unsigned char*>((*local)->data());
  for (std::uint32_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);

  // WRITE 64 KiB at offset 4096 of the server's memory, then READ it back into the second half.
  auto written = (*connection)->write((*local)->slice(0, kBytes), remote->at(4096));
  if (!written) return fail("write", written.error());
  auto read = (*connection)->read((*local)->slice(kBytes, kBytes), remote->at(4096));
  if (!read) return fail("read", read.error());
  // Completions arrive in order; waiting for the READ covers the WRITE, but check both.
  for (auto id : {*written, *read}) {
    auto done = (*connection)->wait(id, 30s);
    if (!done) return fail("wait", done.error());
    if (!done->ok())
      return std::fprintf(stderr, "client: operation failed: %s\n", to_string(done->status).data()), 1;
  }
  if (std::memcmp(bytes, bytes + kBytes, kBytes) != 0)
    return std::fprintf(stderr, "client: bytes differ!\n"), 1;
  std::printf("client: %u bytes written and read back intact\n", kBytes);

  // Fetch-and-add on the counter in the server's first 8 bytes; the old value lands in our memory.
  auto added = (*connection)->fetch_add((*local)->slice(2 * kBytes, 8), remote->at(0), 1);
  if (!added) return fail("fetch_add", added.error());
  auto done = (*connection)->wait(*added, 30s);
  if (!done || !done->ok()) return std::fprintf(stderr, "client: fetch_add failed\n"), 1;
  std::uint64_t old;
  std::memcpy(&old, bytes + 2 * kBytes, 8);
  std::printf("client: counter was %llu, now %llu\n", static_cast<unsigned long long>(old),
              static_cast<unsigned long long>(old + 1));
  return 0;
}
