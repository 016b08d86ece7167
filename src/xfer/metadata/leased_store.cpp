// The MetadataStore every backend shares: namespaces, the keys this store owns, the renewal thread that
// keeps them alive (and puts them back after a server restart), a bound on every call, and the URL.
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "bootstrap/auth.hpp"
#include "core/log.hpp"
#include "xfer/metadata/backend.hpp"

namespace rdmakit::xfer {
namespace {

using metadata::Backend;
using metadata::Clock;
using metadata::Deadline;

std::string as_string(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

class LeasedStore final : public MetadataStore {
 public:
  LeasedStore(std::unique_ptr<Backend> backend, MetadataOptions options, std::string url)
      : backend_(std::move(backend)),
        options_(std::move(options)),
        url_(std::move(url)),
        prefix_(options_.name_space + "/") {}

  // Renewal starts once the store is reachable (open_metadata checked it).
  void start_renewal() {
    renewer_ = std::jthread([this](std::stop_token stop) { renew_loop(stop); });
  }

  ~LeasedStore() override {
    if (renewer_.joinable()) {
      renewer_.request_stop();
      renewer_.join();
    }
    Turn turn = *take_lock(Deadline::max());  // nobody else calls a store being destroyed
    if (owned_.empty()) return;
    // The entries would vanish after the TTL anyway: removing them now only spares peers a stale look.
    if (auto ok = backend_->erase_all(owned_, Clock::now() + options_.timeout); !ok)
      log::debug("xfer", "metadata at " + url_ +
                             ": removing this store's entries on close failed (they "
                             "expire after the ttl): " +
                             ok.error().message());
  }

  Result<void> publish(std::string_view key, const std::vector<std::byte>& value) override {
    auto deadline = Clock::now() + options_.timeout;
    auto full = full_key(key);
    if (!full) return std::unexpected(full.error());
    auto lock = take_lock(deadline);
    if (!lock) return std::unexpected(lock.error());
    auto previous = owned_.find(*full);
    std::optional<std::string> old;
    if (previous != owned_.end()) old = previous->second;
    owned_[*full] = as_string(value);
    auto ok = backend_->put(*full, owned_[*full], old ? &*old : nullptr, owned_, deadline);
    if (!ok) {  // not ours after all: renewals must not publish what the caller was told failed
      if (old)
        owned_[*full] = *old;
      else
        owned_.erase(*full);
    }
    return ok;
  }

  Result<void> unpublish(std::string_view key) override {
    auto deadline = Clock::now() + options_.timeout;
    auto full = full_key(key);
    if (!full) return std::unexpected(full.error());
    auto lock = take_lock(deadline);
    if (!lock) return std::unexpected(lock.error());
    if (!owned_.contains(*full))
      return fail(Errc::NotFound, url_ + ": key '" + std::string(key) + "' of namespace '" +
                                      options_.name_space + "' was not published by this store");
    owned_.erase(*full);
    return backend_->erase(*full, deadline);
  }

  Result<std::optional<std::vector<std::byte>>> lookup(std::string_view key) override {
    auto deadline = Clock::now() + options_.timeout;
    auto full = full_key(key);
    if (!full) return std::unexpected(full.error());
    auto lock = take_lock(deadline);
    if (!lock) return std::unexpected(lock.error());
    auto value = backend_->get(*full, deadline);
    if (!value) return std::unexpected(value.error());
    if (!*value) return std::optional<std::vector<std::byte>>();
    auto bytes = reinterpret_cast<const std::byte*>((*value)->data());
    return std::optional(std::vector<std::byte>(bytes, bytes + (*value)->size()));
  }

  Result<std::vector<std::string>> list() override {
    auto deadline = Clock::now() + options_.timeout;
    auto lock = take_lock(deadline);
    if (!lock) return std::unexpected(lock.error());
    auto keys = backend_->keys(prefix_, deadline);
    if (!keys) return std::unexpected(keys.error());
    std::vector<std::string> names;
    for (auto& key : *keys)
      if (key.starts_with(prefix_)) names.push_back(key.substr(prefix_.size()));
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }

  std::vector<std::string> replaced() const override {
    std::lock_guard lock(replaced_mutex_);
    return replaced_;
  }

  std::uint64_t round_trips() const noexcept override { return backend_->round_trips(); }
  std::string_view backend() const noexcept override { return backend_->name(); }

 private:
  Result<std::string> full_key(std::string_view key) const {
    if (key.empty() || key.size() > 4096)
      return fail(Errc::InvalidArgument, url_ + ": a metadata key must have 1 to 4096 bytes");
    return prefix_ + std::string(key);
  }

  // The right to use the backend (its one connection) and owned_, given back when it goes.
  class Turn {
   public:
    explicit Turn(LeasedStore* store) : store_(store) {}
    Turn(Turn&& other) noexcept : store_(std::exchange(other.store_, nullptr)) {}
    Turn& operator=(Turn&&) = delete;
    ~Turn() {
      if (store_ == nullptr) return;
      {
        std::lock_guard lock(store_->turn_mutex_);
        store_->busy_ = false;
      }
      store_->turn_free_.notify_one();
    }

   private:
    LeasedStore* store_;
  };

  // One backend call at a time; waiting for the turn counts against the call's bound. (A flag and a
  // condition variable rather than std::timed_mutex, whose pthread_mutex_clocklock ThreadSanitizer does not
  // see.)
  Result<Turn> take_lock(Deadline deadline) {
    std::unique_lock lock(turn_mutex_);
    if (!turn_free_.wait_until(lock, deadline, [this] { return !busy_; }))
      return fail(Errc::Timeout, url_ + ": the metadata connection stayed busy for the whole timeout of " +
                                     std::to_string(options_.timeout.count()) + " ms");
    busy_ = true;
    return Turn(this);
  }

  // Under the turn: keys another publisher now holds are no longer ours to renew, put back or erase.
  void forget_replaced(const std::vector<std::string>& keys) {
    for (const auto& key : keys) {
      owned_.erase(key);
      auto name = key.substr(prefix_.size());
      log::warn("xfer", "metadata at " + url_ + ": key '" + name +
                            "' no longer holds this store's value: another publisher replaced it; it is "
                            "not renewed any more (MetadataStore::replaced() lists it)");
      std::lock_guard lock(replaced_mutex_);
      replaced_.push_back(std::move(name));
    }
  }

  void renew_loop(std::stop_token stop) {
    std::mutex wait_mutex;
    std::condition_variable_any wake;
    std::unique_lock wait_lock(wait_mutex);
    for (;;) {
      wake.wait_for(wait_lock, stop, options_.renew_interval, [] { return false; });
      if (stop.stop_requested()) return;
      auto deadline = Clock::now() + options_.timeout;
      auto lock = take_lock(deadline);
      std::vector<std::string> replaced;
      auto ok =
          lock ? backend_->renew(owned_, replaced, deadline) : Result<void>(std::unexpected(lock.error()));
      if (lock) forget_replaced(replaced);
      if (!ok && !renewal_failing_)
        log::warn("xfer", "metadata at " + url_ + ": lease renewal failed, retrying every " +
                              std::to_string(options_.renew_interval.count()) +
                              " ms (this store's entries "
                              "vanish after the ttl if it lasts): " +
                              ok.error().message());
      else if (ok && renewal_failing_)
        log::info("xfer", "metadata at " + url_ + ": lease renewed again; entries republished");
      renewal_failing_ = !ok;
    }
  }

  std::unique_ptr<Backend> backend_;
  MetadataOptions options_;
  std::string url_;
  std::string prefix_;
  std::mutex turn_mutex_;
  std::condition_variable turn_free_;
  bool busy_ = false;  // a call holds the turn (guards backend_ calls and owned_)
  metadata::Owned owned_;
  bool renewal_failing_ = false;  // renewal thread only
  mutable std::mutex replaced_mutex_;
  std::vector<std::string> replaced_;  // names (without the namespace) another publisher took from us
  std::jthread renewer_;               // last: stopped first
};

// "scheme://host:port[/]" -> the scheme and the endpoint; `default_port` when the port is left out.
Result<std::pair<std::string, metadata::Endpoint>> parse_url(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return fail(Errc::InvalidArgument, "metadata URL '" + std::string(url) + "': " + std::string(why) +
                                           " (expected builtin://host:port, redis://host:port or "
                                           "etcd://host:port)");
  };
  auto separator = url.find("://");
  if (separator == std::string_view::npos) return bad("no scheme");
  std::string scheme(url.substr(0, separator));
  std::string_view rest = url.substr(separator + 3);
  if (rest.ends_with('/')) rest.remove_suffix(1);
  std::uint32_t port = scheme == "redis" ? 6379 : scheme == "etcd" ? 2379 : 0;
  auto colon = rest.rfind(':');
  std::string_view host = rest.substr(0, colon);
  if (colon != std::string_view::npos) {
    auto digits = rest.substr(colon + 1);
    port = 0;
    if (digits.empty() || digits.size() > 5) return bad("a bad port");
    for (char c : digits) {
      if (c < '0' || c > '9') return bad("a bad port");
      port = port * 10 + static_cast<std::uint32_t>(c - '0');
    }
  }
  if (host.empty() || host.find_first_of("/@[]") != std::string_view::npos) return bad("a bad host");
  if (port == 0 || port > 65535) return bad("no port (or 0, or over 65535)");
  return std::pair{scheme,
                   metadata::Endpoint{std::string(host), static_cast<std::uint16_t>(port), std::string(url)}};
}

Result<void> check_options(const MetadataOptions& options, std::string_view url) {
  auto bad = [&](std::string why) {
    return fail(Errc::InvalidArgument, "metadata " + std::string(url) + ": " + why);
  };
  if (options.name_space.empty() || options.name_space.find('/') != std::string::npos)
    return bad("the namespace must be non-empty and without '/'");
  if (options.timeout.count() <= 0) return bad("timeout must be positive");
  if (options.ttl.count() <= 0 || options.renew_interval.count() <= 0)
    return bad("ttl and renew_interval must be positive");
  if (options.renew_interval >= options.ttl)
    return bad("renew_interval (" + std::to_string(options.renew_interval.count()) +
               " ms) must be shorter than the ttl (" + std::to_string(options.ttl.count()) +
               " ms), or entries expire between renewals");
  return {};
}

}  // namespace

// Out of line: the destructor is the key function, so the vtable is emitted (and exported) from this one
// file in every build type, not wherever an optimizer happens to keep it (abi/librdmakit.symbols).
MetadataStore::~MetadataStore() = default;

Result<std::unique_ptr<MetadataStore>> open_metadata(std::string_view url, const MetadataOptions& options) {
  auto parsed = parse_url(url);
  if (!parsed) return std::unexpected(parsed.error());
  if (auto ok = check_options(options, url); !ok) return std::unexpected(ok.error());
  auto& [scheme, endpoint] = *parsed;
  std::unique_ptr<Backend> backend;
  if (scheme == "builtin") {
    // The job secret; without one, on loopback, the per-user secret (the server does the same), so a
    // process of another uid cannot even connect.
    auto secret = bootstrap::auth::service_secret(endpoint.host, "the builtin metadata store");
    if (!secret) return std::unexpected(secret.error());
    backend = metadata::make_builtin_backend(endpoint, options, *secret);
  } else if (scheme == "redis") {
    backend = metadata::make_redis_backend(endpoint, options);
  } else if (scheme == "etcd") {
    backend = metadata::make_etcd_backend(endpoint, options);
  } else {
    return fail(Errc::NotSupported, "metadata URL '" + std::string(url) + "': unknown backend '" + scheme +
                                        "' (builtin, redis or etcd)");
  }
  if (auto ok = backend->start(Clock::now() + options.timeout); !ok) return std::unexpected(ok.error());
  auto store = std::make_unique<LeasedStore>(std::move(backend), options, std::string(url));
  store->start_renewal();
  return store;
}

}  // namespace rdmakit::xfer
