// Transfer engine metadata: where a named segment lives.
//
// A process that owns memory segments (a KV-cache pool, a weights buffer) publishes, per segment name, the
// bytes its peers need to reach it (endpoints and remote descriptors; the engine encodes them). Entries
// live in a namespace and are bound to the publisher's lease: the store renews it in the background, and
// when the publisher dies (stops renewing) its entries vanish after the TTL. When the metadata server
// restarts and loses them, the live publishers put them back (republish on the next renewal).
//
// Backends, chosen by URL:
//   "builtin://host:port"  the bootstrap rendezvous store's server (nothing to install; the default)
//   "redis://host:port"    a Redis server (keys with PX expiry, renewed)
//   "etcd://host:port"     an etcd v3 server through its HTTP/JSON gateway (leases + keepalive)
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit::xfer {

struct MetadataOptions {
  std::string name_space = "rdmakit";              // every key is scoped to it
  std::chrono::milliseconds ttl{5000};             // an entry outlives a dead publisher by this
  std::chrono::milliseconds renew_interval{1000};  // how often the lease is renewed
  std::chrono::milliseconds timeout{5000};         // bound of one metadata round trip
  // The server's own authentication, a second wall behind the records' seal (the engine's records are
  // verified by readers whatever the server lets in), used when `password` is not empty. redis: AUTH
  // [username] password on every connection (requirepass, or an ACL user). etcd: the user's token
  // (/v3/auth/authenticate) on every request. Not used by the builtin backend (it proves the job secret).
  std::string username{};
  std::string password{};
};

class RDMAKIT_API MetadataStore {
 public:
  virtual ~MetadataStore();

  // Publishes `value` under `key`, bound to this store's lease (vanishes when this store dies or closes).
  // Publishing an existing key of this store replaces its value. A key another store published and still
  // keeps alive is refused (Errc::InvalidArgument): a name belongs to its first publisher until it
  // unpublishes or its lease expires.
  virtual Result<void> publish(std::string_view key, const std::vector<std::byte>& value) = 0;
  // Removes a key this store published.
  virtual Result<void> unpublish(std::string_view key) = 0;
  // The value under `key`, nullopt when there is none (never published, removed, or its owner died).
  virtual Result<std::optional<std::vector<std::byte>>> lookup(std::string_view key) = 0;
  // Every key of the namespace (for tools and tests).
  virtual Result<std::vector<std::string>> list() = 0;

  // Keys this store published that another publisher replaced since (found by the compare-and-renew of
  // the lease renewal, which then stops renewing them and logs a warning). Empty while all is well.
  virtual std::vector<std::string> replaced() const { return {}; }

  // Metadata round trips this store made so far (lookups, publishes, renewals): benches show that the
  // data path makes none once names are resolved.
  virtual std::uint64_t round_trips() const noexcept = 0;
  // "builtin", "redis" or "etcd".
  virtual std::string_view backend() const noexcept = 0;
};

// Opens a store by URL (see above). The builtin backend needs a server: `serve_builtin_metadata` starts one
// in this process (or any rdmakit bootstrap store server works).
// open_metadata reaches the server before it returns (an unreachable one is an error naming the URL within
// options.timeout). Every call is bounded by options.timeout; a broken connection is reopened by the next
// call. The builtin backend proves the job secret (RDMAKIT_JOB_SECRET) like the bootstrap store; without
// one, on loopback, the per-user secret (so a process of another uid cannot use the store).
RDMAKIT_API Result<std::unique_ptr<MetadataStore>> open_metadata(std::string_view url,
                                                                 const MetadataOptions& options = {});

// A builtin metadata server running in this process (a thread) for as long as the object lives.
class RDMAKIT_API MetadataServer {
 public:
  virtual ~MetadataServer();
  virtual std::uint16_t port() const noexcept = 0;
  // "builtin://host:port", for open_metadata.
  virtual std::string url() const = 0;
};

// Serves the builtin backend on `address` ("host:port"; port 0 picks a free one). Clients prove the job
// secret (RDMAKIT_JOB_SECRET) when set, else, on a loopback host, the per-user secret; a non-loopback host
// without a job secret is refused unless RDMAKIT_INSECURE=1. The rendezvous store's caps apply
// (RDMAKIT_STORE_MAX_*). `rdmakit-metadata serve host:port` runs one standalone.
RDMAKIT_API Result<std::unique_ptr<MetadataServer>> serve_builtin_metadata(
    std::string_view address = "127.0.0.1:0");

}  // namespace rdmakit::xfer
