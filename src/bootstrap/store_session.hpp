// The store's logic without sockets: the data it holds (write-once keys, a cap on total bytes) and one
// client's session (the secret handshake, then requests), turning input bytes into reply bytes. The
// server (store_server.cpp) only moves bytes; the fuzz target drives a session directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bootstrap/auth.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::bootstrap {
namespace wire {
struct Request;
}

struct StoreLimits {
  std::uint64_t max_bytes = 64u << 20;               // store_max_bytes
  std::uint64_t max_request_bytes = 4u << 20;        // store_max_request_bytes
  std::uint64_t max_client_buffer_bytes = 8u << 20;  // store_max_client_buffer_bytes
  std::uint32_t max_clients = 4096;                  // store_max_clients
};

// Reads the four store_* options (RDMAKIT_STORE_MAX_*).
Result<StoreLimits> store_limits();

class StoreData {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StoreData(StoreLimits limits) : limits_(limits) {}
  // Keys are write-once: a second SET of a key is refused, so no client can replace what a rank published.
  Result<void> set(std::string_view key, std::string_view value);
  // A write-once key's value, or a live leased key's.
  const std::string* find(std::string_view key);
  const StoreLimits& limits() const noexcept { return limits_; }
  std::uint64_t bytes() const noexcept { return bytes_; }

  // Leased keys (store_leases.cpp): mutable, each dropped `ttl` after its last put or renewal. They share
  // the byte cap with the write-once keys and never shadow one.
  Result<void> put_leased(std::string_view key, std::string_view value, std::chrono::milliseconds ttl);
  bool renew_leased(std::string_view key, std::chrono::milliseconds ttl);  // false: gone
  Result<void> erase_leased(std::string_view key);
  // Every live key (both kinds) that starts with `prefix`, in order; at most `max_bytes` of key bytes.
  Result<std::vector<std::string>> keys(std::string_view prefix, std::uint64_t max_bytes);

 private:
  struct Leased {
    std::string value;
    Clock::time_point expires;
  };
  // Drops expired leased keys; a full pass at most every 100 ms (or when the store is full).
  void expire(bool force = false);

  StoreLimits limits_;
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, Leased, std::less<>> leased_;
  std::uint64_t bytes_ = 0;
  Clock::time_point next_sweep_{};
};

class StoreSession {
 public:
  enum class Outcome {
    Continue,  // keep serving
    Close,     // send what is in `out`, then close (protocol error or failed proof)
    Overflow,  // the client left more than max_client_buffer_bytes of replies unread: drop it
  };

  StoreSession(std::string secret, auth::Nonce server_nonce)
      : secret_(std::move(secret)), nonce_(server_nonce) {}

  // Appends `input` and serves every complete message, appending replies to `out` (which holds the
  // client's unsent bytes: requests stop being served while it is over the per-client cap).
  Outcome feed(std::string_view input, StoreData& data, std::string& out);
  bool authenticated() const noexcept { return state_ == State::Open; }
  // Answers the hello with this error instead of a challenge (e.g. too many clients): read first, so
  // the close does not reset the connection before the client read why.
  void refuse(std::string why) { refusal_ = std::move(why); }
  // Serves one decoded request of an authenticated client, appending its reply.
  static void serve_request(const wire::Request& request, StoreData& data, std::string& out);

 private:
  enum class State { Hello, Proof, Open, Closed };
  Outcome on_hello(std::string& out);
  Outcome on_proof(std::string& out);
  Outcome on_requests(StoreData& data, std::string& out);
  static void serve_leased(const wire::Request& request, StoreData& data, std::string& out);

  std::string secret_;
  auth::Nonce nonce_;
  std::string client_nonce_;
  State state_ = State::Hello;
  std::string in_;
  std::string refusal_;
};

}  // namespace rdmakit::bootstrap
