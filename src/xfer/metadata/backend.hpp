// What a metadata backend does for the store (leased_store.cpp), in its server's terms. The store holds
// the lock: a backend's calls never overlap. Keys here are full keys (namespace + '/' + name).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdmakit/xfer/metadata.hpp"
#include "xfer/metadata/connection.hpp"

namespace rdmakit::xfer::metadata {

// Every key this store published, with its value: what a renewal keeps alive and republishes.
using Owned = std::map<std::string, std::string>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const noexcept = 0;

  // Reaches the server (and proves who we are, or takes a lease) so that open_metadata fails early.
  virtual Result<void> start(Deadline deadline) = 0;
  // Puts `key` (already in `owned`) bound to this store's lease, only when the key is absent or holds
  // `previous` (our own earlier value; null when we had none): a name belongs to its first publisher
  // until it unpublishes or its lease expires. Errc::InvalidArgument naming the key when it is taken.
  virtual Result<void> put(const std::string& key, const std::string& value, const std::string* previous,
                           const Owned& owned, Deadline deadline) = 0;
  // Keeps every owned key alive, and only while it still holds our value (compare-and-renew); puts back
  // those the server lost (it restarted, or we were cut off longer than the TTL) unless another publisher
  // took the name meanwhile. Keys found holding another value are added to `replaced`.
  virtual Result<void> renew(const Owned& owned, std::vector<std::string>& replaced, Deadline deadline) = 0;
  virtual Result<void> erase(const std::string& key, Deadline deadline) = 0;
  // Removes every owned key (the store closes).
  virtual Result<void> erase_all(const Owned& owned, Deadline deadline) = 0;
  virtual Result<std::optional<std::string>> get(const std::string& key, Deadline deadline) = 0;
  // Every key that starts with `prefix`, once each, in any order.
  virtual Result<std::vector<std::string>> keys(const std::string& prefix, Deadline deadline) = 0;

  std::uint64_t round_trips() const noexcept { return round_trips_.load(std::memory_order_relaxed); }

 protected:
  void count_round_trip() noexcept { round_trips_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> round_trips_{0};
};

// The outcome of a call whose value is not needed (libstdc++ 12's std::expected has no transform()).
template <typename T>
Result<void> outcome(Result<T> result) {
  if (!result) return std::unexpected(result.error());
  return {};
}

// Where the server is, from the URL.
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string url;  // as given, for messages
};

std::unique_ptr<Backend> make_builtin_backend(const Endpoint& endpoint, const MetadataOptions& options,
                                              std::string secret);
std::unique_ptr<Backend> make_redis_backend(const Endpoint& endpoint, const MetadataOptions& options);

// The refusal of a put onto a name another publisher holds.
inline std::unexpected<Error> taken(const std::string& where, const std::string& key) {
  return fail(Errc::InvalidArgument, where + ": key '" + key +
                                         "' is published by another store (a name belongs to its first "
                                         "publisher until it unpublishes or its lease expires)");
}
std::unique_ptr<Backend> make_etcd_backend(const Endpoint& endpoint, const MetadataOptions& options);

}  // namespace rdmakit::xfer::metadata
