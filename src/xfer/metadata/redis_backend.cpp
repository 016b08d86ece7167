// The Redis backend: our own RESP client (resp.hpp) over one connection, no client library. Every key is a
// plain Redis string with a PX expiry; renewal is a pipeline of PEXPIRE (one round trip), and a key the
// server lost is SET again. list() walks SCAN with a MATCH on the namespace. A name belongs to its first
// publisher: puts and renewals are Lua scripts that compare the stored value with ours first (one atomic
// step at the server). With MetadataOptions::password every connection starts with AUTH.
#include <set>

#include "xfer/metadata/backend.hpp"
#include "xfer/metadata/resp.hpp"

namespace rdmakit::xfer::metadata {
namespace {

// A SCAN MATCH pattern for "starts with `prefix`": glob characters escaped.
std::string match_prefix(std::string_view prefix) {
  std::string pattern;
  for (char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') pattern.push_back('\\');
    pattern.push_back(c);
  }
  return pattern + "*";
}

// KEYS[1] key; ARGV value, our previous value ("" for none: records are never empty), ttl. 1 put, 0 taken.
constexpr std::string_view kPutScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == false or (ARGV[2] ~= '' and v == ARGV[2]) then "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3]) return 1 end return 0";
// KEYS[1] key; ARGV our value, ttl. 1 renewed, 0 gone, -1 another value (replaced).
constexpr std::string_view kRenewScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == false then return 0 end "
    "if v ~= ARGV[1] then return -1 end "
    "redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1";

class RedisBackend final : public Backend {
 public:
  RedisBackend(const Endpoint& endpoint, const MetadataOptions& options)
      : ttl_ms_(std::to_string(options.ttl.count())),
        username_(options.username),
        password_(options.password),
        connection_(endpoint.host, endpoint.port, endpoint.url,
                    [this](Connection& c, Deadline d) { return authenticate(c, d); }) {}

  std::string_view name() const noexcept override { return "redis"; }

  Result<void> start(Deadline deadline) override {
    auto pong = ask({command({"PING"})}, deadline);
    if (!pong) return std::unexpected(pong.error());
    return expect_simple(pong->front(), "PONG");
  }

  Result<void> put(const std::string& key, const std::string& value, const std::string* previous,
                   const Owned&, Deadline deadline) override {
    auto reply = ask({put_command(key, value, previous ? *previous : std::string())}, deadline);
    if (!reply) return std::unexpected(reply.error());
    if (reply->front().kind != resp::Value::Kind::Integer) return unexpected_reply(reply->front());
    if (reply->front().integer != 1) return taken(connection_.where(), key);
    return {};
  }

  Result<void> renew(const Owned& owned, std::vector<std::string>& replaced, Deadline deadline) override {
    if (owned.empty()) return {};
    std::vector<std::string> commands;
    for (const auto& [key, value] : owned)
      commands.push_back(command({"EVAL", kRenewScript, "1", key, value, ttl_ms_}));
    auto replies = ask(commands, deadline);
    if (!replies) return std::unexpected(replies.error());
    commands.clear();
    std::vector<const std::string*> lost;
    std::size_t i = 0;
    for (const auto& [key, value] : owned) {
      const resp::Value& reply = (*replies)[i++];
      if (reply.kind != resp::Value::Kind::Integer) return unexpected_reply(reply);
      if (reply.integer == -1) replaced.push_back(key);
      if (reply.integer != 0) continue;
      commands.push_back(put_command(key, value, {}));  // lost (the server restarted): put back if free
      lost.push_back(&key);
    }
    if (commands.empty()) return {};
    auto puts = ask(commands, deadline);
    if (!puts) return std::unexpected(puts.error());
    for (std::size_t k = 0; k < puts->size(); ++k) {
      const resp::Value& reply = (*puts)[k];
      if (reply.kind != resp::Value::Kind::Integer) return unexpected_reply(reply);
      if (reply.integer != 1) replaced.push_back(*lost[k]);  // another publisher took it meanwhile
    }
    return {};
  }

  Result<void> erase(const std::string& key, Deadline deadline) override {
    return integer_reply(ask({command({"DEL", key})}, deadline));
  }

  Result<void> erase_all(const Owned& owned, Deadline deadline) override {
    std::vector<std::string_view> args{"DEL"};
    for (const auto& entry : owned) args.push_back(entry.first);
    return integer_reply(ask({resp::command(args)}, deadline));
  }

  Result<std::optional<std::string>> get(const std::string& key, Deadline deadline) override {
    auto reply = ask({command({"GET", key})}, deadline);
    if (!reply) return std::unexpected(reply.error());
    resp::Value& value = reply->front();
    if (value.kind == resp::Value::Kind::Nil) return std::optional<std::string>();
    if (value.kind != resp::Value::Kind::Bulk) return unexpected_reply(value);
    return std::optional(std::move(value.text));
  }

  // SCAN may return a key twice and walks in pages: one round trip per page.
  Result<std::vector<std::string>> keys(const std::string& prefix, Deadline deadline) override {
    std::set<std::string> found;
    std::string cursor = "0";
    auto pattern = match_prefix(prefix);
    do {
      auto reply = ask({command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"})}, deadline);
      if (!reply) return std::unexpected(reply.error());
      resp::Value& page = reply->front();
      if (page.kind != resp::Value::Kind::Array || page.elements.size() != 2 ||
          page.elements[0].kind != resp::Value::Kind::Bulk ||
          page.elements[1].kind != resp::Value::Kind::Array)
        return unexpected_reply(page);
      cursor = page.elements[0].text;
      for (auto& key : page.elements[1].elements) {
        if (key.kind != resp::Value::Kind::Bulk) return unexpected_reply(key);
        found.insert(std::move(key.text));
      }
    } while (cursor != "0");
    return std::vector<std::string>(found.begin(), found.end());
  }

 private:
  static std::string command(std::initializer_list<std::string_view> args) { return resp::command(args); }
  std::string put_command(const std::string& key, const std::string& value,
                          const std::string& previous) const {
    return command({"EVAL", kPutScript, "1", key, value, previous, ttl_ms_});
  }

  // AUTH [username] password, first on every (re)connection, when a password is set.
  Result<void> authenticate(Connection& connection, Deadline deadline) {
    if (password_.empty()) return {};
    count_round_trip();
    auto auth = username_.empty() ? command({"AUTH", password_}) : command({"AUTH", username_, password_});
    auto reply = connection.exchange<std::vector<resp::Value>>(
        auth, deadline,
        [](std::string_view in, std::size_t& consumed) { return resp::parse_many(in, 1, consumed); });
    if (!reply) return std::unexpected(reply.error());
    if (reply->front().kind == resp::Value::Kind::Simple && reply->front().text == "OK") return {};
    return fail(
        Errc::ConnectionRefused,
        connection.where() + ": redis refused AUTH (MetadataOptions::username/password)" +
            (reply->front().kind == resp::Value::Kind::Error ? ": " + reply->front().text.substr(0, 200)
                                                             : std::string()));
  }

  // Sends the commands in one write and reads their replies: one round trip.
  Result<std::vector<resp::Value>> ask(const std::vector<std::string>& commands, Deadline deadline) {
    std::string requests;
    for (const auto& c : commands) requests += c;
    count_round_trip();
    auto count = commands.size();
    return connection_.exchange<std::vector<resp::Value>>(
        requests, deadline, [count](std::string_view in, std::size_t& consumed) {
          return resp::parse_many(in, count, consumed);
        });
  }

  std::unexpected<Error> unexpected_reply(const resp::Value& reply) const {
    if (reply.kind == resp::Value::Kind::Error)
      return fail(Errc::ProtocolError, connection_.where() + ": redis refused: " + reply.text.substr(0, 200));
    return fail(Errc::ProtocolError, connection_.where() + ": an unexpected redis reply");
  }

  Result<void> expect_simple(const resp::Value& reply, std::string_view text) const {
    if (reply.kind == resp::Value::Kind::Simple && reply.text == text) return {};
    return unexpected_reply(reply);
  }

  Result<void> integer_reply(Result<std::vector<resp::Value>> replies) const {
    if (!replies) return std::unexpected(replies.error());
    if (replies->front().kind != resp::Value::Kind::Integer) return unexpected_reply(replies->front());
    return {};
  }

  std::string ttl_ms_;
  std::string username_, password_;
  Connection connection_;
};

}  // namespace

std::unique_ptr<Backend> make_redis_backend(const Endpoint& endpoint, const MetadataOptions& options) {
  return std::make_unique<RedisBackend>(endpoint, options);
}

}  // namespace rdmakit::xfer::metadata
