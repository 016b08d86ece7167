// Leased keys of the rendezvous store: the mutable, expiring key space behind the transfer engine's
// builtin metadata backend (store_wire.hpp lists the requests). Expiry is lazy: a read never sees an
// expired key, and a sweep drops them from memory (and from the byte count) every 100 ms of traffic.
#include <algorithm>
#include <optional>

#include "bootstrap/store_session.hpp"
#include "bootstrap/store_wire.hpp"

namespace rdmakit::bootstrap {
namespace {

constexpr auto kSweepEvery = std::chrono::milliseconds(100);

// The ttl_ms field that starts a PUT or RENEW value; nullopt when missing or out of bounds.
std::optional<std::chrono::milliseconds> read_ttl(std::string_view value) {
  if (value.size() < 4) return std::nullopt;
  std::uint32_t ms = wire::get_u32(value.data());
  if (ms == 0 || ms > wire::kMaxTtlMs) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

}  // namespace

void StoreData::expire(bool force) {
  auto now = Clock::now();
  if (!force && now < next_sweep_) return;
  next_sweep_ = now + kSweepEvery;
  std::erase_if(leased_, [&](const auto& entry) {
    if (entry.second.expires > now) return false;
    bytes_ -= entry.first.size() + entry.second.value.size();
    return true;
  });
}

Result<void> StoreData::put_leased(std::string_view key, std::string_view value,
                                   std::chrono::milliseconds ttl) {
  if (values_.contains(key))
    return fail(Errc::InvalidArgument, "key '" + std::string(key) + "' is a write-once key");
  expire();
  auto it = leased_.find(key);
  std::uint64_t old_size = it == leased_.end() ? 0 : key.size() + it->second.value.size();
  std::uint64_t size = key.size() + value.size();
  if (bytes_ - old_size + size > limits_.max_bytes) expire(true);
  if (bytes_ - old_size + size > limits_.max_bytes)
    return fail(Errc::ResourceExhausted,
                "the store is full: " + std::to_string(bytes_ - old_size) + " + " + std::to_string(size) +
                    " bytes would exceed store_max_bytes=" + std::to_string(limits_.max_bytes));
  auto expires = Clock::now() + ttl;
  if (it == leased_.end()) {
    leased_.emplace(std::string(key), Leased{std::string(value), expires});
  } else {
    it->second = Leased{std::string(value), expires};
  }
  bytes_ = bytes_ - old_size + size;
  return {};
}

bool StoreData::renew_leased(std::string_view key, std::chrono::milliseconds ttl) {
  auto it = leased_.find(key);
  auto now = Clock::now();
  if (it == leased_.end() || it->second.expires <= now) return false;
  it->second.expires = now + ttl;
  return true;
}

Result<void> StoreData::erase_leased(std::string_view key) {
  if (values_.contains(key))
    return fail(Errc::InvalidArgument, "key '" + std::string(key) + "' is a write-once key");
  if (auto it = leased_.find(key); it != leased_.end()) {
    bytes_ -= key.size() + it->second.value.size();
    leased_.erase(it);
  }
  return {};
}

Result<std::vector<std::string>> StoreData::keys(std::string_view prefix, std::uint64_t max_bytes) {
  expire(true);
  std::vector<std::string> found;
  std::uint64_t bytes = 0;
  auto collect = [&](const auto& map) -> Result<void> {
    for (auto it = map.lower_bound(prefix); it != map.end() && it->first.starts_with(prefix); ++it) {
      bytes += it->first.size() + 4;
      if (bytes > max_bytes)
        return fail(Errc::ResourceExhausted, "too many keys under '" + std::string(prefix) +
                                                 "' to list at once (over " + std::to_string(max_bytes) +
                                                 " bytes)");
      found.push_back(it->first);
    }
    return {};
  };
  if (auto ok = collect(values_); !ok) return std::unexpected(ok.error());
  if (auto ok = collect(leased_); !ok) return std::unexpected(ok.error());
  std::sort(found.begin(), found.end());
  return found;
}

void StoreSession::serve_leased(const wire::Request& request, StoreData& data, std::string& out) {
  auto refuse = [&](const Error& error) { wire::append_error(out, error.code(), error.message()); };
  auto ttl = read_ttl(request.value);
  if ((request.op == wire::kPut || request.op == wire::kRenew) && !ttl)
    return refuse(Error(Errc::InvalidArgument,
                        "a leased key's ttl must be 1.." + std::to_string(wire::kMaxTtlMs) + " ms"));
  switch (request.op) {
    case wire::kPut:
      if (auto ok = data.put_leased(request.key, request.value.substr(4), *ttl); !ok)
        return refuse(ok.error());
      return wire::append_reply(out, wire::kOk, {});
    case wire::kRenew:
      return wire::append_reply(out, data.renew_leased(request.key, *ttl) ? wire::kOk : wire::kNotFound, {});
    case wire::kErase:
      if (auto ok = data.erase_leased(request.key); !ok) return refuse(ok.error());
      return wire::append_reply(out, wire::kOk, {});
    default: {
      // Half the client's output cap: the reply must fit where the client's replies are buffered.
      auto keys = data.keys(request.key, data.limits().max_client_buffer_bytes / 2);
      if (!keys) return refuse(keys.error());
      std::string payload;
      for (const auto& key : *keys) {
        wire::put_u32(payload, static_cast<std::uint32_t>(key.size()));
        payload += key;
      }
      return wire::append_reply(out, wire::kOk, payload);
    }
  }
}

}  // namespace rdmakit::bootstrap
