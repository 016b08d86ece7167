// The builtin backend: the leased keys of the bootstrap rendezvous store (src/bootstrap/store_wire.hpp),
// reached with the same job-secret handshake, and serve_builtin_metadata() to host one.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <utility>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_server.hpp"
#include "bootstrap/store_wire.hpp"
#include "xfer/metadata/backend.hpp"

namespace rdmakit::xfer {
namespace metadata {
namespace {

namespace wire = bootstrap::wire;
namespace auth = bootstrap::auth;

// The largest reply we accept: a LIST of a big namespace, well under the server's own output cap.
constexpr std::size_t kMaxReply = 64u << 20;

struct Answer {
  wire::Status status = wire::kOk;
  std::string payload;
};

// Decodes `count` replies; an Error reply becomes the server's error.
ReplyParser<std::vector<Answer>> answers(std::size_t count) {
  return [count](std::string_view buffer,
                 std::size_t& consumed) -> Result<std::optional<std::vector<Answer>>> {
    std::vector<Answer> found;
    consumed = 0;
    while (found.size() < count) {
      wire::Reply reply;
      auto decoded = wire::decode_reply(buffer.substr(consumed), kMaxReply, reply);
      if (decoded == wire::Decode::NeedMore) return std::nullopt;
      if (decoded == wire::Decode::Bad)
        return fail(Errc::ProtocolError, "a malformed reply (not an rdmakit store?)");
      consumed += reply.size;
      if (reply.status == wire::kError) {
        auto code = reply.payload.empty() ? 0 : static_cast<std::uint8_t>(reply.payload[0]);
        if (code < static_cast<std::uint8_t>(Errc::InvalidArgument) ||
            code > static_cast<std::uint8_t>(Errc::TransportFailure))
          return fail(Errc::ProtocolError, "a malformed error reply");
        return fail(static_cast<Errc>(code), "the store refused: " + std::string(reply.payload.substr(1)));
      }
      found.push_back(Answer{reply.status, std::string(reply.payload)});
    }
    return found;
  };
}

std::string ttl_field(std::chrono::milliseconds ttl) {
  std::string out;
  wire::put_u32(out, static_cast<std::uint32_t>(std::min<std::int64_t>(ttl.count(), wire::kMaxTtlMs)));
  return out;
}

class BuiltinBackend final : public Backend {
 public:
  BuiltinBackend(const Endpoint& endpoint, const MetadataOptions& options, std::string secret)
      : ttl_(ttl_field(options.ttl)),
        secret_(std::move(secret)),
        connection_(endpoint.host, endpoint.port, endpoint.url,
                    [this](Connection& c, Deadline d) { return handshake(c, d); }) {}

  std::string_view name() const noexcept override { return "builtin"; }

  Result<void> start(Deadline deadline) override { return outcome(ask({}, 0, deadline)); }

  // The server has no compare-and-set: a GET, then the PUT when the key is free or ours. Only clients
  // that proved the secret reach the server, so the window between the two is open to them alone.
  Result<void> put(const std::string& key, const std::string& value, const std::string* previous,
                   const Owned&, Deadline deadline) override {
    auto current = get(key, deadline);
    if (!current) return std::unexpected(current.error());
    if (*current && (!previous || **current != *previous)) return taken(connection_.where(), key);
    return outcome(ask(wire::request(wire::kPut, key, ttl_ + value), 1, deadline));
  }

  // One round trip renews every key and reads it back (RENEW + GET each); a second puts back those the
  // server no longer has. A key holding another value was replaced: reported, not renewed again.
  Result<void> renew(const Owned& owned, std::vector<std::string>& replaced, Deadline deadline) override {
    if (owned.empty()) return {};
    std::string requests;
    for (const auto& [key, value] : owned)
      requests += wire::request(wire::kRenew, key, ttl_) + wire::request(wire::kGet, key, {});
    auto renewed = ask(requests, 2 * owned.size(), deadline);
    if (!renewed) return std::unexpected(renewed.error());
    std::string puts;
    std::size_t count = 0, i = 0;
    for (const auto& [key, value] : owned) {
      const Answer& renew_answer = (*renewed)[i++];
      const Answer& read = (*renewed)[i++];
      if (read.status == wire::kOk && read.payload != value) {
        replaced.push_back(key);
        continue;
      }
      if (renew_answer.status != wire::kNotFound) continue;
      puts += wire::request(wire::kPut, key, ttl_ + value);
      ++count;
    }
    if (count == 0) return {};
    return outcome(ask(puts, count, deadline));
  }

  Result<void> erase(const std::string& key, Deadline deadline) override {
    return outcome(ask(wire::request(wire::kErase, key, {}), 1, deadline));
  }

  Result<void> erase_all(const Owned& owned, Deadline deadline) override {
    std::string requests;
    for (const auto& entry : owned) requests += wire::request(wire::kErase, entry.first, {});
    return outcome(ask(requests, owned.size(), deadline));
  }

  Result<std::optional<std::string>> get(const std::string& key, Deadline deadline) override {
    auto answer = ask(wire::request(wire::kGet, key, {}), 1, deadline);
    if (!answer) return std::unexpected(answer.error());
    if ((*answer)[0].status == wire::kNotFound) return std::optional<std::string>();
    return std::optional(std::move((*answer)[0].payload));
  }

  Result<std::vector<std::string>> keys(const std::string& prefix, Deadline deadline) override {
    auto answer = ask(wire::request(wire::kList, prefix, {}), 1, deadline);
    if (!answer) return std::unexpected(answer.error());
    return decode_keys((*answer)[0].payload);
  }

 private:
  // Sends `requests` (pipelined) and reads `count` replies: one round trip.
  Result<std::vector<Answer>> ask(std::string_view requests, std::size_t count, Deadline deadline) {
    if (count == 0) return connection_.exchange<std::vector<Answer>>({}, deadline, answers(0));
    count_round_trip();
    return connection_.exchange<std::vector<Answer>>(requests, deadline, answers(count));
  }

  Result<std::vector<std::string>> decode_keys(std::string_view payload) const {
    std::vector<std::string> keys;
    while (!payload.empty()) {
      if (payload.size() < 4 || wire::get_u32(payload.data()) > payload.size() - 4)
        return fail(Errc::ProtocolError, connection_.where() + ": a malformed key list");
      std::size_t length = wire::get_u32(payload.data());
      keys.emplace_back(payload.substr(4, length));
      payload.remove_prefix(4 + length);
    }
    return keys;
  }

  // The store's mutual proof of the job secret (store_wire.hpp): we prove ours, and check the server's.
  Result<void> handshake(Connection& connection, Deadline deadline) {
    auto nonce = auth::fresh_nonce();
    if (!nonce) return std::unexpected(nonce.error());
    count_round_trip();
    auto challenge = connection.exchange<std::vector<Answer>>(
        std::string(wire::kHelloMagic) + std::string(auth::bytes(*nonce)), deadline, answers(1));
    if (!challenge) return std::unexpected(challenge.error());
    const std::string& server_nonce = (*challenge)[0].payload;
    if ((*challenge)[0].status != wire::kOk || server_nonce.size() != auth::kNonceSize)
      return fail(Errc::ProtocolError,
                  connection.where() + ": a malformed challenge (not an rdmakit store?)");
    auto proof = auth::mac(secret_, {wire::kMacLabel, "client", auth::bytes(*nonce), server_nonce});
    count_round_trip();
    auto answer = connection.exchange<std::vector<Answer>>(
        std::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()), deadline, answers(1));
    if (!answer) return std::unexpected(answer.error());
    auto expected = auth::mac(secret_, {wire::kMacLabel, "server", auth::bytes(*nonce), server_nonce});
    const std::string& mac = (*answer)[0].payload;
    if (!auth::verify(expected, std::span(reinterpret_cast<const std::uint8_t*>(mac.data()), mac.size())))
      return fail(Errc::ConnectionRefused,
                  connection.where() + ": the server does not know the job secret (RDMAKIT_JOB_SECRET)");
    return {};
  }

  std::string ttl_;  // the ttl_ms field of PUT and RENEW
  std::string secret_;
  Connection connection_;
};

}  // namespace

std::unique_ptr<Backend> make_builtin_backend(const Endpoint& endpoint, const MetadataOptions& options,
                                              std::string secret) {
  return std::make_unique<BuiltinBackend>(endpoint, options, std::move(secret));
}

}  // namespace metadata

namespace {

class BuiltinServer final : public MetadataServer {
 public:
  BuiltinServer(std::unique_ptr<bootstrap::StoreServer> server, std::string host)
      : server_(std::move(server)), host_(std::move(host)) {}
  std::uint16_t port() const noexcept override { return server_->port(); }
  std::string url() const override { return "builtin://" + host_ + ":" + std::to_string(port()); }

 private:
  std::unique_ptr<bootstrap::StoreServer> server_;
  std::string host_;
};

}  // namespace

// Out of line: the destructor is the key function, so the vtable is emitted (and exported) from this one
// file in every build type, not wherever an optimizer happens to keep it (abi/librdmakit.symbols).
MetadataServer::~MetadataServer() = default;

Result<std::unique_ptr<MetadataServer>> serve_builtin_metadata(std::string_view address) {
  auto colon = address.rfind(':');
  std::string host(address.substr(0, colon));
  std::uint32_t port = 0;
  auto digits = colon == std::string_view::npos ? std::string_view() : address.substr(colon + 1);
  bool bad = host.empty() || digits.empty() || digits.size() > 5;
  for (char c : digits) {
    bad = bad || c < '0' || c > '9';
    port = port * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (bad || port > 65535)
    return fail(Errc::InvalidArgument, "builtin metadata server: address '" + std::string(address) +
                                           "' is not host:port (port 0: any free port)");
  // The job secret; without one, on loopback, the per-user secret, so that only processes of this uid can
  // use the store (a stranger could otherwise squat names or replace records); beyond loopback without a
  // job secret it is refused unless option insecure is set.
  auto secret = bootstrap::auth::service_secret(host, "builtin metadata server at " + std::string(address));
  if (!secret) return std::unexpected(secret.error());
  auto limits = bootstrap::store_limits();
  if (!limits) return std::unexpected(limits.error());
  auto server = bootstrap::StoreServer::start(host, static_cast<std::uint16_t>(port), *secret, *limits);
  if (!server)
    return std::unexpected(Error(server.error().code(), "builtin metadata server at " + std::string(address) +
                                                            ": " + server.error().message()));
  return std::unique_ptr<MetadataServer>(std::make_unique<BuiltinServer>(std::move(*server), host));
}

}  // namespace rdmakit::xfer
