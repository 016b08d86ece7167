// The etcd backend: etcd v3 through its HTTP/JSON gateway (etcd 3.4: /v3/...; keys and values base64),
// with our own HTTP/1.1 client over one kept-alive connection. This store's keys hang off one lease:
// renewal is one keepalive; when the lease is gone (the server restarted empty, or we were cut off past
// the TTL) a new lease is granted and every owned key put again. Closing revokes the lease, which deletes
// the keys in one request. A name belongs to its first publisher: puts are transactions that compare
// first (the key absent, or holding our previous value), and each renewal checks in one transaction that
// every key still holds our value. With MetadataOptions::username and password, the store authenticates
// (/v3/auth/authenticate) and sends the token with every request, authenticating again when etcd says
// the token is no longer valid.
#include "xfer/metadata/backend.hpp"
#include "xfer/metadata/http.hpp"

namespace rdmakit::xfer::metadata {
namespace {

using json::Value;

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix.empty() ? std::string(1, '\0') : prefix;
}

std::string field(std::string_view name, std::string_view json_value) {
  return json::quote(name) + ":" + std::string(json_value);
}

class EtcdBackend final : public Backend {
 public:
  EtcdBackend(const Endpoint& endpoint, const MetadataOptions& options)
      : ttl_s_(std::max<std::int64_t>(1, (options.ttl.count() + 999) / 1000)),
        host_(endpoint.host + ":" + std::to_string(endpoint.port)),
        username_(options.username),
        password_(options.password),
        connection_(endpoint.host, endpoint.port, endpoint.url) {}

  std::string_view name() const noexcept override { return "etcd"; }

  Result<void> start(Deadline deadline) override {
    if (auto ok = authenticate(deadline); !ok) return ok;
    return grant(deadline);
  }

  Result<void> put(const std::string& key, const std::string& value, const std::string* previous,
                   const Owned& owned, Deadline deadline) override {
    auto ok = put_one(key, value, previous, deadline);
    if (ok || !lease_lost(ok.error())) return ok;
    std::vector<std::string> replaced;  // the lease expired under us: every key went with it
    if (auto again = regrant_and_put(owned, replaced, deadline); !again) return again;
    for (const auto& k : replaced)
      if (k == key) return taken(connection_.where(), key);
    return {};
  }

  // A store that owns nothing lets its lease lapse (no traffic from pure readers); a later put finds it
  // gone and grants a new one.
  Result<void> renew(const Owned& owned, std::vector<std::string>& replaced, Deadline deadline) override {
    if (owned.empty()) return {};
    auto reply = call("/v3/lease/keepalive", "{" + field("ID", json::quote(lease_)) + "}", deadline);
    if (!reply) return std::unexpected(reply.error());
    const Value* result = reply->find("result");
    const Value* ttl = result ? result->find("TTL") : nullptr;
    // A lease that is gone comes back without a TTL (zero is left out of the JSON).
    if (!ttl || ttl->text == "0") return regrant_and_put(owned, replaced, deadline);
    if (unsettled_) return put_all(owned, replaced, deadline);
    return check_values(owned, replaced, deadline);
  }

  Result<void> erase(const std::string& key, Deadline deadline) override {
    return outcome(
        call("/v3/kv/deleterange", "{" + field("key", json::quote(base64::encode(key))) + "}", deadline));
  }

  Result<void> erase_all(const Owned&, Deadline deadline) override {
    return outcome(call("/v3/lease/revoke", "{" + field("ID", json::quote(lease_)) + "}", deadline));
  }

  Result<std::optional<std::string>> get(const std::string& key, Deadline deadline) override {
    auto reply = call("/v3/kv/range", "{" + field("key", json::quote(base64::encode(key))) + "}", deadline);
    if (!reply) return std::unexpected(reply.error());
    const Value* kvs = reply->find("kvs");
    if (!kvs || kvs->elements.empty()) return std::optional<std::string>();
    if (kvs->kind != Value::Kind::Array) return malformed("kvs is not an array");
    const Value* value = kvs->elements[0].find("value");  // an empty value is left out of the JSON
    if (!value) return std::optional<std::string>(std::string());
    auto decoded = value->kind == Value::Kind::String ? base64::decode(value->text) : std::nullopt;
    if (!decoded) return malformed("a value that is not base64");
    return std::optional(std::move(*decoded));
  }

  Result<std::vector<std::string>> keys(const std::string& prefix, Deadline deadline) override {
    auto reply = call("/v3/kv/range",
                      "{" + field("key", json::quote(base64::encode(prefix))) + "," +
                          field("range_end", json::quote(base64::encode(prefix_end(prefix)))) + "," +
                          field("keys_only", "true") + "}",
                      deadline);
    if (!reply) return std::unexpected(reply.error());
    std::vector<std::string> keys;
    const Value* kvs = reply->find("kvs");
    if (!kvs) return keys;
    if (kvs->kind != Value::Kind::Array) return malformed("kvs is not an array");
    for (const auto& kv : kvs->elements) {
      const Value* key = kv.find("key");
      auto decoded = key && key->kind == Value::Kind::String ? base64::decode(key->text) : std::nullopt;
      if (!decoded) return malformed("a key that is not base64");
      keys.push_back(std::move(*decoded));
    }
    return keys;
  }

 private:
  std::unexpected<Error> malformed(std::string_view why) const {
    return fail(Errc::ProtocolError,
                connection_.where() + ": an unexpected etcd reply (" + std::string(why) + ")");
  }

  static bool lease_lost(const Error& error) {
    return error.code() == Errc::NotFound && error.message().find("lease not found") != std::string::npos;
  }

  // With a password: a token for the user, sent with every later request.
  Result<void> authenticate(Deadline deadline) {
    if (password_.empty()) return {};
    token_.clear();
    auto reply = call_once(
        "/v3/auth/authenticate",
        "{" + field("name", json::quote(username_)) + "," + field("password", json::quote(password_)) + "}",
        deadline);
    if (!reply)
      return fail(Errc::ConnectionRefused,
                  "etcd refused the user '" + username_ +
                      "' (MetadataOptions::username/password): " + reply.error().message());
    const Value* token = reply->find("token");
    if (!token || token->kind != Value::Kind::String || token->text.empty())
      return malformed("no auth token");
    token_ = token->text;
    return {};
  }

  static bool token_invalid(const Error& error) {
    return error.message().find("invalid auth token") != std::string::npos;
  }

  // call_once, authenticating again once when etcd no longer takes our token (it expires when unused).
  Result<Value> call(std::string_view path, const std::string& body, Deadline deadline) {
    auto reply = call_once(path, body, deadline);
    if (reply || password_.empty() || !token_invalid(reply.error())) return reply;
    if (auto ok = authenticate(deadline); !ok) return std::unexpected(ok.error());
    return call_once(path, body, deadline);
  }

  // One POST, one round trip: the reply's JSON, or the gateway's error (404 is gRPC's NotFound).
  Result<Value> call_once(std::string_view path, const std::string& body, Deadline deadline) {
    count_round_trip();
    auto response = connection_.exchange<http::Response>(
        http::post(host_, path, body, token_), deadline,
        [](std::string_view in, std::size_t& consumed) { return http::parse_response(in, consumed); });
    if (!response) return std::unexpected(response.error());
    auto parsed = json::parse(response->body);
    if (!parsed || parsed->kind != Value::Kind::Object) {
      connection_.close();  // whatever this is, the next call starts clean
      return malformed(parsed ? "not a JSON object" : parsed.error().message());
    }
    if (response->status == 200) return parsed;
    const Value* message = parsed->find("error");
    std::string text =
        message && message->kind == Value::Kind::String ? message->text.substr(0, 200) : "no message";
    return fail(response->status == 404 ? Errc::NotFound : Errc::ProtocolError,
                connection_.where() + ": etcd refused " + std::string(path) + " (HTTP " +
                    std::to_string(response->status) + "): " + text);
  }

  Result<void> grant(Deadline deadline) {
    auto reply = call("/v3/lease/grant", "{" + field("TTL", std::to_string(ttl_s_)) + "}", deadline);
    if (!reply) return std::unexpected(reply.error());
    const Value* id = reply->find("ID");
    if (!id || id->kind != Value::Kind::String || id->text.empty() ||
        id->text.find_first_not_of("0123456789") != std::string::npos)
      return malformed("no lease ID");
    lease_ = id->text;
    return {};
  }

  static std::string compare(const std::string& key, std::string_view target, const std::string& value) {
    auto operand = target == "CREATE" ? field("create_revision", "\"0\"")
                                      : field("value", json::quote(base64::encode(value)));
    return "{" + field("key", json::quote(base64::encode(key))) + "," + field("target", json::quote(target)) +
           "," + operand + "}";
  }

  // One transaction: `compares` all hold -> `success` runs. Whether they held.
  Result<bool> txn(const std::string& compares, const std::string& success, Deadline deadline) {
    auto reply =
        call("/v3/kv/txn",
             "{" + field("compare", "[" + compares + "]") + "," + field("success", "[" + success + "]") + "}",
             deadline);
    if (!reply) return std::unexpected(reply.error());
    const Value* succeeded = reply->find("succeeded");  // false is left out of the JSON
    return succeeded != nullptr && succeeded->text == "true";
  }

  // Puts `key` when it is absent, or holds `previous`; InvalidArgument (taken) otherwise.
  Result<void> put_one(const std::string& key, const std::string& value, const std::string* previous,
                       Deadline deadline) {
    auto request = "{" +
                   field("request_put", "{" + field("key", json::quote(base64::encode(key))) + "," +
                                            field("value", json::quote(base64::encode(value))) + "," +
                                            field("lease", json::quote(lease_)) + "}") +
                   "}";
    auto created = txn(compare(key, "CREATE", {}), request, deadline);
    if (!created) return std::unexpected(created.error());
    if (*created) return {};
    if (previous) {
      auto swapped = txn(compare(key, "VALUE", *previous), request, deadline);
      if (!swapped) return std::unexpected(swapped.error());
      if (*swapped) return {};
    }
    return taken(connection_.where(), key);
  }

  // One transaction compares every owned key with our value; when one differs, each is looked at alone:
  // gone (put back when still free) or replaced.
  // Transactions compare every owned key with our value (at most kMaxTxnOps compares each: etcd's default
  // --max-txn-ops); when one differs, the keys of that transaction are looked at alone: gone (put back
  // when still free) or replaced.
  Result<void> check_values(const Owned& owned, std::vector<std::string>& replaced, Deadline deadline) {
    constexpr std::size_t kMaxTxnOps = 128;
    for (auto first = owned.begin(); first != owned.end();) {
      auto last = first;
      std::string compares;
      for (std::size_t n = 0; last != owned.end() && n < kMaxTxnOps; ++last, ++n)
        compares += (compares.empty() ? "" : ",") + compare(last->first, "VALUE", last->second);
      auto same = txn(compares, "", deadline);
      if (!same) return std::unexpected(same.error());
      for (auto it = first; !*same && it != last; ++it)
        if (auto ok = check_one(it->first, it->second, replaced, deadline); !ok) return ok;
      first = last;
    }
    return {};
  }

  Result<void> check_one(const std::string& key, const std::string& value, std::vector<std::string>& replaced,
                         Deadline deadline) {
    auto current = get(key, deadline);
    if (!current) return std::unexpected(current.error());
    if (*current && **current == value) return {};
    if (*current) {
      replaced.push_back(key);
      return {};
    }
    auto put = put_one(key, value, nullptr, deadline);
    if (!put && put.error().code() != Errc::InvalidArgument) return put;
    if (!put) replaced.push_back(key);
    return {};
  }

  Result<void> regrant_and_put(const Owned& owned, std::vector<std::string>& replaced, Deadline deadline) {
    if (auto ok = grant(deadline); !ok) return ok;
    return put_all(owned, replaced, deadline);
  }

  // Puts every owned key on the current lease (each only while free or ours); until all went through,
  // each renewal tries again.
  Result<void> put_all(const Owned& owned, std::vector<std::string>& replaced, Deadline deadline) {
    unsettled_ = true;
    for (const auto& [key, value] : owned) {
      auto ok = put_one(key, value, &value, deadline);
      if (!ok && ok.error().code() == Errc::InvalidArgument) {
        replaced.push_back(key);
        continue;
      }
      if (!ok) return ok;
    }
    unsettled_ = false;
    return {};
  }

  std::int64_t ttl_s_;  // etcd leases count whole seconds
  std::string host_;    // the Host header
  std::string username_, password_;
  std::string token_;  // from /v3/auth/authenticate; empty without a password
  Connection connection_;
  std::string lease_;       // the lease ID, decimal as the gateway writes it
  bool unsettled_ = false;  // a new lease whose keys are not all put yet
};

}  // namespace

std::unique_ptr<Backend> make_etcd_backend(const Endpoint& endpoint, const MetadataOptions& options) {
  return std::make_unique<EtcdBackend>(endpoint, options);
}

}  // namespace rdmakit::xfer::metadata
