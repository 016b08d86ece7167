// The server half of the rendezvous store: one thread, poll() over the listening socket and the clients.
// Every socket is non-blocking and every client has its own output buffer, so a client that does not
// read its replies only delays itself (and is dropped once it holds store_max_client_buffer_bytes).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "bootstrap/store_session.hpp"
#include "core/fd.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::bootstrap {

class StoreServer {
 public:
  // Listens on host:port (port 0: any free port). With a secret, a host that is not an address of this
  // machine falls back to all interfaces (MASTER_ADDR may name this host some other way); without one it
  // is an error, since an unauthenticated store must not be reachable from where nobody expected it.
  static Result<std::unique_ptr<StoreServer>> start(const std::string& host, std::uint16_t port,
                                                    std::string secret, StoreLimits limits);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  std::uint16_t port() const noexcept { return port_; }
  // Ends the server thread (and so the accepting) and joins it; idempotent, from any thread. The
  // destructor calls it, and so does an exit handler for every server still alive at exit() (below).
  void stop();

 private:
  struct Client;
  StoreServer(Fd listener, Fd stop, std::uint16_t port, std::string secret, StoreLimits limits);
  void run();
  void accept_clients(std::list<Client>& clients);

  Fd listener_;
  Fd stop_;  // eventfd: written by the destructor to end run()
  std::uint16_t port_;
  std::string secret_;
  StoreData data_;         // only the server thread touches it
  std::mutex stop_mutex_;  // stop() from the destructor and from the exit handler
  std::thread thread_;     // last: joined first
};

}  // namespace rdmakit::bootstrap
