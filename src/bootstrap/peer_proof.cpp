#include "bootstrap/peer_proof.hpp"

#include <algorithm>
#include <array>

#include "bootstrap/auth.hpp"
#include "core/message_channel.hpp"

namespace rdmakit::bootstrap {
namespace {

enum : std::uint8_t { kChallenge = 1, kProof = 2, kAccept = 3 };

// Payloads: challenge nonce_a; proof nonce_i mac identity_i; accept mac identity_a. The identity is the
// variable tail, so a challenge says nothing but its nonce. The channel bounds the whole frame: a stranger
// can make the acceptor hold one receive buffer of kMaxFrame bytes and wait `timeout`, nothing more.
constexpr detail::FrameSpec kProofSpec{.name = "peer proof",
                                       .magic = 0x50504b52,  // "RKPP"
                                       .version = 2,
                                       .max_type = kAccept,
                                       .max_payload = 2 * 32 + kMaxPeerIdentity};

struct ProofMessage {
  std::uint8_t type = 0;
  auth::Nonce nonce{};
  auth::Mac mac{};
  std::string identity;

  Result<void> send(detail::MessageChannel& channel) const {
    std::array<std::byte, kProofSpec.max_payload> buffer;
    detail::PayloadWriter out(buffer);
    if (type != kAccept) out.put(nonce);
    if (type != kChallenge) out.put(mac).put_text(identity);
    return channel.send(type, out.written());
  }

  static Result<ProofMessage> receive(detail::MessageChannel& channel, std::uint8_t type,
                                      std::chrono::nanoseconds timeout) {
    auto frame = channel.receive(type, timeout);
    if (!frame) return std::unexpected(frame.error());
    ProofMessage m{.type = type};
    detail::PayloadReader in(kProofSpec, frame->payload);
    if (type != kAccept) in.get(m.nonce);
    if (type != kChallenge) {
      in.get(m.mac);
      auto identity = in.rest();  // at most kMaxPeerIdentity: the spec bounds the payload
      m.identity.assign(reinterpret_cast<const char*>(identity.data()), identity.size());
    }
    if (auto ok = in.finish(); !ok) return std::unexpected(ok.error());
    return m;
  }
};

// A proof runs under one deadline, whatever its steps.
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout) : at_(std::chrono::steady_clock::now() + timeout) {}
  std::chrono::nanoseconds left() const {
    return std::max(at_ - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero());
  }

 private:
  std::chrono::steady_clock::time_point at_;
};

Result<detail::MessageChannel> open_channel(Context& context, Connection& connection,
                                            const PeerProofConfig& config) {
  auto channel = detail::MessageChannel::open(context, connection, kProofSpec,
                                              {.receives = 2, .send_timeout = config.timeout});
  if (!channel) connection.close();  // a proof that cannot run is a refused one
  return channel;
}

auth::Mac initiator_mac(const PeerProofConfig& c, const auth::Nonce& a, const auth::Nonce& i,
                        std::string_view identity_i) {
  return auth::mac(c.secret, {c.label, "initiator", auth::bytes(a), auth::bytes(i), identity_i});
}
auth::Mac acceptor_mac(const PeerProofConfig& c, const auth::Nonce& a, const auth::Nonce& i,
                       std::string_view identity_i, std::string_view identity_a) {
  return auth::mac(c.secret, {c.label, "acceptor", auth::bytes(a), auth::bytes(i), identity_i, identity_a});
}

Result<void> check_identity(std::string_view identity) {
  if (identity.size() > kMaxPeerIdentity)
    return fail(Errc::InvalidArgument, "peer proof: an identity of at most 118 bytes");
  return {};
}

}  // namespace

Result<std::string> prove_initiate(Context& context, Connection& connection, const PeerProofConfig& config,
                                   std::string_view identity) {
  if (auto ok = check_identity(identity); !ok) return std::unexpected(ok.error());
  Deadline deadline(config.timeout);
  auto channel = open_channel(context, connection, config);
  if (!channel) return std::unexpected(channel.error());
  auto posted = channel->expect();
  if (posted) posted = channel->expect();
  if (!posted) return std::unexpected(posted.error());
  auto challenge = ProofMessage::receive(*channel, kChallenge, deadline.left());
  if (!challenge) return std::unexpected(challenge.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  ProofMessage proof{.type = kProof, .nonce = *nonce, .identity = std::string(identity)};
  proof.mac = initiator_mac(config, challenge->nonce, *nonce, identity);
  if (auto ok = proof.send(*channel); !ok) return std::unexpected(ok.error());
  auto accept = ProofMessage::receive(*channel, kAccept, deadline.left());
  if (!accept)
    return fail(Errc::ConnectionRefused,
                "the peer refused this process's proof of the secret, or closed the connection (" +
                    accept.error().message() +
                    "): is RDMAKIT_JOB_SECRET the same on both sides, and are they the same user?");
  if (!auth::verify(acceptor_mac(config, challenge->nonce, *nonce, identity, accept->identity), accept->mac))
    return fail(Errc::ConnectionRefused,
                "the peer did not prove the secret (RDMAKIT_JOB_SECRET, or the same user)");
  if (auto ok = channel->release(); !ok) return std::unexpected(ok.error());
  return accept->identity;
}

Result<std::string> prove_accept(Context& context, Connection& connection, const PeerProofConfig& config,
                                 std::string_view identity,
                                 const std::function<Result<void>()>& before_accept) {
  if (auto ok = check_identity(identity); !ok) return std::unexpected(ok.error());
  Deadline deadline(config.timeout);
  auto channel = open_channel(context, connection, config);
  if (!channel) return std::unexpected(channel.error());
  if (auto ok = channel->expect(); !ok) return std::unexpected(ok.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  if (auto ok = ProofMessage{.type = kChallenge, .nonce = *nonce}.send(*channel); !ok)
    return std::unexpected(ok.error());
  auto proof = ProofMessage::receive(*channel, kProof, deadline.left());
  if (!proof) return std::unexpected(proof.error());
  if (!auth::verify(initiator_mac(config, *nonce, proof->nonce, proof->identity), proof->mac))
    return fail(Errc::ConnectionRefused, "a peer did not prove the secret (refused)");
  if (before_accept)
    if (auto ok = before_accept(); !ok) return std::unexpected(ok.error());
  ProofMessage accept{.type = kAccept, .identity = std::string(identity)};
  accept.mac = acceptor_mac(config, *nonce, proof->nonce, proof->identity, identity);
  if (auto ok = accept.send(*channel); !ok) return std::unexpected(ok.error());
  if (auto ok = channel->release(); !ok) return std::unexpected(ok.error());
  return proof->identity;
}

}  // namespace rdmakit::bootstrap
