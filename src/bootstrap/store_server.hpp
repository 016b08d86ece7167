// The server half of the rendezvous store: one thread, poll() over the listening socket and the clients.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "core/fd.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::bootstrap {

class StoreServer {
 public:
  // Listens on host:port (port 0: any free port). A host that is not an address of this machine falls
  // back to all interfaces, so MASTER_ADDR may be the host's name as the other ranks know it.
  static Result<std::unique_ptr<StoreServer>> start(const std::string& host, std::uint16_t port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  std::uint16_t port() const noexcept { return port_; }

 private:
  StoreServer(Fd listener, Fd stop, std::uint16_t port);
  void run();
  // Parses and answers every complete request in `buffer`; false when the client broke the protocol.
  bool serve(int fd, std::string& buffer);

  Fd listener_;
  Fd stop_;  // eventfd: written by the destructor to end run()
  std::uint16_t port_;
  std::map<std::string, std::string> values_;  // only the server thread touches it
  std::thread thread_;                         // last: joined first
};

}  // namespace rdmakit::bootstrap
