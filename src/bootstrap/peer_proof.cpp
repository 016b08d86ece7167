#include "bootstrap/peer_proof.hpp"

#include <algorithm>
#include <array>

#include "bootstrap/auth.hpp"
#include "core/message_channel.hpp"

namespace rdmakit::bootstrap {
namespace {

using detail::kAccept;
using detail::kChallenge;
using detail::kProof;
using detail::ProofMessage;
using rdmakit::detail::Deadline;

Result<void> send(rdmakit::detail::MessageChannel& channel, const ProofMessage& m, const Deadline& deadline) {
  std::array<std::byte, 2 * 32 + kMaxPeerIdentity> buffer;
  rdmakit::detail::PayloadWriter out(buffer);
  if (m.type != kAccept) out.put(m.nonce);
  if (m.type != kChallenge) out.put(m.mac).put_text(m.identity);
  return channel.send(m.type, out.written(), deadline.left());
}

Result<ProofMessage> receive(rdmakit::detail::MessageChannel& channel, std::uint8_t type,
                             std::chrono::nanoseconds timeout) {
  auto frame = channel.receive(type, timeout);
  if (!frame) return std::unexpected(frame.error());
  return detail::decode_proof(*frame);
}

Result<rdmakit::detail::MessageChannel> open_channel(Context& context, Connection& connection,
                                                     const PeerProofConfig& config) {
  auto channel = rdmakit::detail::MessageChannel::open(context, connection, detail::kProofSpec,
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

// The channel bounds the whole frame: a stranger can make the acceptor hold one receive buffer of
// max_frame() bytes and wait out the timeout, nothing more.
const rdmakit::detail::FrameSpec detail::kProofSpec{.name = "peer proof",
                                                    .magic = 0x50504b52,  // "RKPP"
                                                    .version = 2,
                                                    .max_type = kAccept,
                                                    .max_payload = 2 * 32 + kMaxPeerIdentity};

Result<ProofMessage> detail::decode_proof(const rdmakit::detail::Frame& frame) {
  ProofMessage m{.type = frame.type};
  rdmakit::detail::PayloadReader in(kProofSpec, frame.payload);
  if (m.type != kAccept) in.get(m.nonce);
  if (m.type != kChallenge) {
    in.get(m.mac);
    auto identity = in.rest();
    // The spec's bound fits a proof (nonce, mac, identity); an accept has no nonce, so its tail could be
    // 32 bytes longer than any identity we send.
    if (identity.size() > kMaxPeerIdentity)
      return fail(Errc::ProtocolError, "peer proof: an identity of " + std::to_string(identity.size()) +
                                           " bytes (at most " + std::to_string(kMaxPeerIdentity) + ")");
    m.identity.assign(reinterpret_cast<const char*>(identity.data()), identity.size());
  }
  if (auto ok = in.finish(); !ok) return std::unexpected(ok.error());
  return m;
}

Result<std::string> prove_initiate(Context& context, Connection& connection, const PeerProofConfig& config,
                                   std::string_view identity) {
  if (auto ok = check_identity(identity); !ok) return std::unexpected(ok.error());
  Deadline deadline(config.timeout);
  auto channel = open_channel(context, connection, config);
  if (!channel) return std::unexpected(channel.error());
  if (auto posted = channel->expect(2); !posted) return std::unexpected(posted.error());
  auto challenge = receive(*channel, kChallenge, deadline.left());
  if (!challenge) return std::unexpected(challenge.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  ProofMessage proof{.type = kProof, .nonce = *nonce, .identity = std::string(identity)};
  proof.mac = initiator_mac(config, challenge->nonce, *nonce, identity);
  if (auto ok = send(*channel, proof, deadline); !ok) return std::unexpected(ok.error());
  auto accept = receive(*channel, kAccept, deadline.left());
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

Result<std::string> prove_accept(
    Context& context, Connection& connection, const PeerProofConfig& config, std::string_view identity,
    const std::function<Result<void>(std::string_view initiator)>& before_accept) {
  if (auto ok = check_identity(identity); !ok) return std::unexpected(ok.error());
  Deadline deadline(config.timeout);
  auto channel = open_channel(context, connection, config);
  if (!channel) return std::unexpected(channel.error());
  if (auto ok = channel->expect(); !ok) return std::unexpected(ok.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  if (auto ok = send(*channel, ProofMessage{.type = kChallenge, .nonce = *nonce}, deadline); !ok)
    return std::unexpected(ok.error());
  auto proof = receive(*channel, kProof, deadline.left());
  if (!proof) return std::unexpected(proof.error());
  if (!auth::verify(initiator_mac(config, *nonce, proof->nonce, proof->identity), proof->mac))
    return fail(Errc::ConnectionRefused, "a peer did not prove the secret (refused)");
  if (before_accept)
    if (auto ok = before_accept(proof->identity); !ok) return std::unexpected(ok.error());
  ProofMessage accept{.type = kAccept, .identity = std::string(identity)};
  accept.mac = acceptor_mac(config, *nonce, proof->nonce, proof->identity, identity);
  if (auto ok = send(*channel, accept, deadline); !ok) return std::unexpected(ok.error());
  if (auto ok = channel->release(); !ok) return std::unexpected(ok.error());
  return proof->identity;
}

}  // namespace rdmakit::bootstrap
