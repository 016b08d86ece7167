// Uses the installed rdmakit: a WRITE over tcp loopback between two contexts of this process.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <rdmakit/rdmakit.hpp>
#include <thread>

int main() {
  using namespace std::chrono_literals;
  using rdmakit::Access;
  auto server = rdmakit::Context::open({.transport = "tcp"});
  auto client = rdmakit::Context::open({.transport = "tcp"});
  if (!server || !client) return 1;
  auto listener = (*server)->listen();
  if (!listener) return 1;
  std::shared_ptr<rdmakit::Connection> accepted;
  std::thread acceptor([&] { accepted = (*listener)->accept(10s).value_or(nullptr); });
  auto connection = (*client)->connect((*listener)->address());
  acceptor.join();
  if (!connection || !accepted) return 1;
  char source[] = "hello from an installed rdmakit";
  char target[sizeof(source)] = {};
  auto local = (*client)->register_memory(source, sizeof(source), Access::LocalWrite);
  auto remote = (*server)->register_memory(target, sizeof(target), Access::LocalWrite | Access::RemoteWrite);
  if (!local || !remote) return 1;
  auto segment = (*local)->whole();
  auto at = (*remote)->descriptor().at(0, sizeof(target));
  if (!segment || !at) return 1;
  auto id = (*connection)->write(*segment, *at);
  if (!id) return 1;
  auto done = (*connection)->wait(*id, 10s);
  if (!done || !done->ok() || std::strcmp(source, target) != 0) return 1;
  std::printf("consumer: %s\n", target);
  return 0;
}
