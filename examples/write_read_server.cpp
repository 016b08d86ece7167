// The classic RDMA pair, server side: register memory, publish its descriptor, then only wait.
// The client WRITEs into the memory, READs it back and bumps a counter with fetch-and-add; none of that
// needs this program to do anything.
//
//   write_read_server <publish-file> [listen-address]
// writes "<address> <descriptor-hex>" to <publish-file>. The transport comes from RDMAKIT_TRANSPORT.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "rdmakit/rdmakit.hpp"

namespace {
int fail(const char* what, const rdmakit::Error& error) {
  std::fprintf(stderr, "server: %s: %s\n", what, error.describe().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  using rdmakit::Access;
  if (argc < 2) return std::fprintf(stderr, "usage: write_read_server <publish-file> [listen-address]\n"), 2;

  auto context = rdmakit::Context::open();
  if (!context) return fail("open", context.error());
  // 1 MiB that peers may write, read and update atomically; the first 8 bytes are a counter.
  auto memory = (*context)->allocate(
      1 << 20, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic);
  if (!memory) return fail("allocate", memory.error());
  auto listener = (*context)->listen(argc > 2 ? argv[2] : "");
  if (!listener) return fail("listen", listener.error());

  // Publish where we are and what may be touched. Any channel works; a file is the simplest.
  std::ofstream(argv[1]) << (*listener)->address() << ' ' << (*memory)->descriptor().to_hex() << '\n';
  std::printf("server: %s transport, listening on %s\n", std::string((*context)->transport()).c_str(),
              (*listener)->address().c_str());
  std::fflush(stdout);

  auto connection = (*listener)->accept(60s);
  if (!connection) return fail("accept", connection.error());
  // Wait for the client to hang up: a posted receive completes (flushed) when the connection closes.
  auto inbox = (*context)->allocate(64, Access::LocalWrite);
  if (!inbox) return fail("allocate", inbox.error());
  auto id = (*connection)->post_recv((*inbox)->slice(0, 64));
  if (!id) return fail("post_recv", id.error());
  auto done = (*connection)->wait(*id, 120s);
  if (!done) return fail("wait", done.error());
  std::printf("server: client gone; counter is %llu\n",
              static_cast<unsigned long long>(*static_cast<std::uint64_t*>((*memory)->data())));
  return 0;
}
