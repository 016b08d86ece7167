#include "coll/handshake.hpp"

#include <algorithm>

namespace rdmakit::coll::detail {
namespace {

namespace auth = bootstrap::auth;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kLabel = "rdmakit-coll/v1";
enum : std::uint8_t { kChallenge = 1, kProof = 2, kAccept = 3, kDescriptor = 4 };

std::string_view view(const RemoteRegion::Bytes& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// What both sides know once the nonces are exchanged; every MAC of one handshake covers all of it.
struct Transcript {
  const HandshakeConfig& config;
  int acceptor, initiator;
  auth::Nonce nonce_a, nonce_i;

  auth::Mac mac(std::string_view role, std::string_view descriptor = {}) const {
    std::string world = std::to_string(config.world), a = std::to_string(acceptor),
                i = std::to_string(initiator);
    return auth::mac(config.secret, {kLabel, role, config.job, world, a, i, auth::bytes(nonce_a),
                                     auth::bytes(nonce_i), descriptor});
  }
};

using rdmakit::detail::Deadline;

Result<rdmakit::detail::MessageChannel> open_channel(Context& context, Connection& connection,
                                                     const HandshakeConfig& config) {
  auto channel = rdmakit::detail::MessageChannel::open(context, connection, HandshakeMessage::kSpec,
                                                       {.receives = 2, .send_timeout = config.timeout});
  if (!channel) connection.close();
  return channel;
}

Result<void> send(rdmakit::detail::MessageChannel& channel, const HandshakeMessage& message,
                  const Deadline& deadline) {
  return channel.send(message.type, message.payload(), deadline.left());
}

Result<HandshakeMessage> receive(rdmakit::detail::MessageChannel& channel, std::uint8_t type,
                                 const Deadline& deadline) {
  auto frame = channel.receive(type, deadline.left());
  if (!frame) return std::unexpected(Error(frame.error().code(), "handshake: " + frame.error().message()));
  return HandshakeMessage::from(*frame);
}

Error unproven(const std::string& who) {
  return Error(Errc::ConnectionRefused,
               who +
                   " did not prove the job secret (RDMAKIT_JOB_SECRET must be the same "
                   "on every rank)");
}

}  // namespace

const rdmakit::detail::FrameSpec HandshakeMessage::kSpec{.name = "coll handshake",
                                                         .magic = 0x48434b52,  // "RKCH"
                                                         .version = 2,
                                                         .max_type = kDescriptor,
                                                         .max_payload = kPayload};

HandshakeMessage::Payload HandshakeMessage::payload() const noexcept {
  Payload out{};
  rdmakit::detail::PayloadWriter(out).put(rank).put(world).put(nonce).put(mac).put(descriptor);
  return out;
}

HandshakeMessage::Bytes HandshakeMessage::encode() const noexcept {
  Bytes out{};
  (void)rdmakit::detail::encode_frame(kSpec, type, payload(), out);
  return out;
}

Result<HandshakeMessage> HandshakeMessage::from(const rdmakit::detail::Frame& frame) {
  HandshakeMessage m{.type = frame.type};
  rdmakit::detail::PayloadReader in(kSpec, frame.payload);
  in.get(m.rank).get(m.world).get(m.nonce).get(m.mac).get(m.descriptor);
  if (auto ok = in.finish(); !ok) return std::unexpected(ok.error());
  return m;
}

Result<HandshakeMessage> HandshakeMessage::decode(std::span<const std::byte> bytes,
                                                  std::uint8_t expected_type) {
  auto frame = rdmakit::detail::decode_frame(kSpec, bytes, expected_type);
  if (!frame) return std::unexpected(frame.error());
  return from(*frame);
}

Result<RemoteRegion> handshake_initiate(Context& context, Connection& connection,
                                        const HandshakeConfig& config, int self, int expected,
                                        const RemoteRegion& mine) {
  Deadline deadline(config.timeout);
  auto channel = open_channel(context, connection, config);
  if (!channel) return std::unexpected(channel.error());
  if (auto posted = channel->expect(2); !posted) return std::unexpected(posted.error());
  auto challenge = receive(*channel, kChallenge, deadline);
  if (!challenge) return std::unexpected(challenge.error());
  if (challenge->rank != static_cast<std::uint32_t>(expected) ||
      challenge->world != static_cast<std::uint32_t>(config.world))
    return fail(Errc::ProtocolError, "handshake: the listener of rank " + std::to_string(expected) +
                                         " answers as rank " + std::to_string(challenge->rank) + " of " +
                                         std::to_string(challenge->world));
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  Transcript t{config, expected, self, challenge->nonce, *nonce};
  HandshakeMessage proof{.type = kProof,
                         .rank = static_cast<std::uint32_t>(self),
                         .world = static_cast<std::uint32_t>(config.world),
                         .nonce = *nonce,
                         .mac = t.mac("initiator")};
  if (auto ok = send(*channel, proof, deadline); !ok) return std::unexpected(ok.error());
  auto accept = receive(*channel, kAccept, deadline);
  if (!accept && !connection.health())  // the acceptor closed the connection on our proof
    return fail(Errc::ConnectionRefused,
                "rank " + std::to_string(expected) +
                    " closed the connection on this rank's "
                    "proof of the job secret (is RDMAKIT_JOB_SECRET the same on every rank?)");
  if (!accept) return std::unexpected(accept.error());
  if (!auth::verify(t.mac("acceptor", view(accept->descriptor)), accept->mac))
    return std::unexpected(unproven("rank " + std::to_string(expected)));
  auto theirs = RemoteRegion::deserialize(accept->descriptor);
  if (!theirs) return std::unexpected(theirs.error());
  HandshakeMessage descriptor{.type = kDescriptor,
                              .rank = static_cast<std::uint32_t>(self),
                              .world = static_cast<std::uint32_t>(config.world),
                              .descriptor = mine.serialize()};
  descriptor.mac = t.mac("descriptor", view(descriptor.descriptor));
  if (auto ok = send(*channel, descriptor, deadline); !ok) return std::unexpected(ok.error());
  if (auto ok = channel->release(); !ok) return std::unexpected(ok.error());
  return *theirs;
}

Result<ProvenPeer> handshake_accept(Context& context, Connection& connection, const HandshakeConfig& config,
                                    int self, const RemoteRegion& mine,
                                    const std::function<bool(int)>& acceptable) {
  Deadline deadline(config.timeout);
  auto channel = open_channel(context, connection, config);
  if (!channel) return std::unexpected(channel.error());
  if (auto posted = channel->expect(2); !posted) return std::unexpected(posted.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  HandshakeMessage challenge{.type = kChallenge,
                             .rank = static_cast<std::uint32_t>(self),
                             .world = static_cast<std::uint32_t>(config.world),
                             .nonce = *nonce};
  if (auto ok = send(*channel, challenge, deadline); !ok) return std::unexpected(ok.error());
  auto proof = receive(*channel, kProof, deadline);
  if (!proof) return std::unexpected(proof.error());
  // The claimed rank is only a hint of which MAC to expect; the MAC decides.
  int rank = proof->rank < static_cast<std::uint32_t>(config.world) ? static_cast<int>(proof->rank) : -1;
  Transcript t{config, self, rank, *nonce, proof->nonce};
  if (rank < 0 || proof->world != static_cast<std::uint32_t>(config.world) ||
      !auth::verify(t.mac("initiator"), proof->mac))
    return std::unexpected(unproven("a connection claiming rank " + std::to_string(proof->rank)));
  if (!acceptable(rank))
    return fail(Errc::ProtocolError,
                "handshake: rank " + std::to_string(rank) + " is not expected here (or connected twice)");
  HandshakeMessage accept{.type = kAccept,
                          .rank = static_cast<std::uint32_t>(self),
                          .world = static_cast<std::uint32_t>(config.world),
                          .descriptor = mine.serialize()};
  accept.mac = t.mac("acceptor", view(accept.descriptor));
  if (auto ok = send(*channel, accept, deadline); !ok) return std::unexpected(ok.error());
  auto descriptor = receive(*channel, kDescriptor, deadline);
  if (!descriptor) return std::unexpected(descriptor.error());
  if (!auth::verify(t.mac("descriptor", view(descriptor->descriptor)), descriptor->mac))
    return std::unexpected(unproven("rank " + std::to_string(rank)));
  auto theirs = RemoteRegion::deserialize(descriptor->descriptor);
  if (!theirs) return std::unexpected(theirs.error());
  if (auto ok = channel->release(); !ok) return std::unexpected(ok.error());
  return ProvenPeer{rank, *theirs};
}

}  // namespace rdmakit::coll::detail
