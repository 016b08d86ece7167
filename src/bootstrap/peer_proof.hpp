// Proof of a shared secret over a freshly made rdmakit connection, before either side says anything about
// itself: the services that are not collectives (the replica server, the transfer engine's listeners, the
// perf tool) run it on every accepted connection. Three messages of the one message channel, the acceptor
// speaking first so the initiator, whose receives are posted right after connect, never sends into an
// unposted queue:
//   1 A -> I  challenge: nonce_a                                   (nothing else about the acceptor)
//   2 I -> A  proof:     nonce_i, identity_i, HMAC(secret, label | "initiator" | nonce_a | nonce_i |
//   identity_i) 3 A -> I  accept:    identity_a, HMAC(secret, label | "acceptor" | nonce_a | nonce_i |
//   identity_i | identity_a)
// Each side learns the other's identity (a short name the MAC binds: an engine id, "rank 3") only once its
// proof verified; an acceptor that sees a bad proof closes the connection. The secret comes from
// auth::service_secret: the job secret, or on loopback the per-user secret, so a stranger uid fails too.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "bootstrap/auth.hpp"
#include "core/message_channel.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::bootstrap {

struct PeerProofConfig {
  std::string secret;  // from auth::service_secret (empty only when `insecure` allowed it)
  std::string label;   // the service, e.g. "rdmakit-ckpt-replica/v1": a proof for one is no proof for another
  std::chrono::milliseconds timeout{10000};
};

inline constexpr std::size_t kMaxPeerIdentity = 118;

namespace detail {
// The proof's messages, frames of the one message channel (core/message_channel.hpp). Payloads: challenge
// nonce_a; proof nonce_i, mac, identity_i; accept mac, identity_a. The identity is the variable tail, so a
// challenge says nothing but its nonce.
struct ProofMessage {
  std::uint8_t type = 0;  // kChallenge, kProof, kAccept
  auth::Nonce nonce{};
  auth::Mac mac{};
  std::string identity;
};
enum : std::uint8_t { kChallenge = 1, kProof = 2, kAccept = 3 };
extern const rdmakit::detail::FrameSpec kProofSpec;
// A frame's payload as the message of its type (pure, fuzzed: the first bytes a stranger's reach).
Result<ProofMessage> decode_proof(const rdmakit::detail::Frame& frame);
}  // namespace detail

// Initiator (the side that connected). Returns the acceptor's proven identity. Errc::ConnectionRefused when
// the acceptor refused our proof or could not prove the secret itself.
Result<std::string> prove_initiate(Context& context, Connection& connection, const PeerProofConfig& config,
                                   std::string_view identity);

// Acceptor. Returns the initiator's proven identity; closes the connection on any failure.
// `before_accept` runs after the initiator's proof verified and before the final message is sent, with the
// initiator's proven identity: post the receives of the service's own protocol there (when that identity
// says the connection will carry it), so the initiator's first message finds one posted.
Result<std::string> prove_accept(
    Context& context, Connection& connection, const PeerProofConfig& config, std::string_view identity,
    const std::function<Result<void>(std::string_view initiator)>& before_accept = {});

}  // namespace rdmakit::bootstrap
