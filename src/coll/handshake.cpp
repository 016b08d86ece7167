#include "coll/handshake.hpp"

#include <cstring>

namespace rdmakit::coll::detail {
namespace {

namespace auth = bootstrap::auth;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kMagic = "RKCH";
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

// Four message buffers in one small region per connection: receives in 0 and 1, sends in 2 and 3. A
// handshake that does not finish closes the connection before the region goes, so no receive is ever
// left posted into freed memory.
class Channel {
 public:
  Channel(Connection& connection, std::chrono::milliseconds timeout)
      : connection_(&connection), deadline_(Clock::now() + timeout) {}
  ~Channel() {
    if (!finished_) connection_->close();
  }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  Result<void> open(Context& context) {
    auto region = context.allocate(4 * HandshakeMessage::kSize, Access::LocalWrite);
    if (!region) return std::unexpected(region.error());
    region_ = std::move(*region);
    return {};
  }
  // Every receive posted has completed: the connection is the caller's again.
  void finish() noexcept { finished_ = true; }

  Result<std::uint64_t> post_recv(int slot) { return connection_->post_recv(segment(slot)); }

  Result<HandshakeMessage> receive(std::uint64_t id, int slot, std::uint8_t type) {
    if (auto done = complete(id, "receive"); !done) return std::unexpected(done.error());
    auto bytes = std::span(static_cast<const std::byte*>(region_->data()) + slot * HandshakeMessage::kSize,
                           HandshakeMessage::kSize);
    return HandshakeMessage::decode(bytes, type);
  }

  Result<void> send(int slot, const HandshakeMessage& message) {
    auto bytes = message.encode();
    std::memcpy(static_cast<std::byte*>(region_->data()) + slot * HandshakeMessage::kSize, bytes.data(),
                bytes.size());
    auto id = connection_->send(segment(slot));
    if (!id) return std::unexpected(id.error());
    return complete(*id, "send");
  }

 private:
  Segment segment(int slot) const {
    return Segment{reinterpret_cast<std::uint64_t>(region_->data()) +
                       static_cast<std::uint64_t>(slot) * HandshakeMessage::kSize,
                   HandshakeMessage::kSize, region_->lkey()};
  }

  Result<void> complete(std::uint64_t id, const char* what) {
    auto left = std::max(deadline_ - Clock::now(), Clock::duration::zero());
    auto done = connection_->wait(id, left);
    if (!done)
      return std::unexpected(
          Error(done.error().code(), std::string("handshake ") + what + ": " + done.error().message()));
    if (!done->ok() || (Connection::is_recv_id(id) && done->bytes != HandshakeMessage::kSize))
      return fail(Errc::ProtocolError, std::string("handshake ") + what + " failed (" +
                                           std::string(to_string(done->status)) + ", " +
                                           std::to_string(done->bytes) + " bytes)");
    return {};
  }

  Connection* connection_;
  Clock::time_point deadline_;
  std::shared_ptr<MemoryRegion> region_;
  bool finished_ = false;
};

Error unproven(const std::string& who) {
  return Error(Errc::ConnectionRefused,
               who +
                   " did not prove the job secret (RDMAKIT_JOB_SECRET must be the same "
                   "on every rank)");
}

}  // namespace

HandshakeMessage::Bytes HandshakeMessage::encode() const noexcept {
  Bytes out{};
  std::memcpy(out.data(), kMagic.data(), 4);
  out[4] = static_cast<std::byte>(type);
  std::memcpy(out.data() + 8, &rank, 4);
  std::memcpy(out.data() + 12, &world, 4);
  std::memcpy(out.data() + 16, nonce.data(), nonce.size());
  std::memcpy(out.data() + 48, mac.data(), mac.size());
  std::memcpy(out.data() + 80, descriptor.data(), descriptor.size());
  return out;
}

Result<HandshakeMessage> HandshakeMessage::decode(std::span<const std::byte> bytes,
                                                  std::uint8_t expected_type) {
  if (bytes.size() != kSize) return fail(Errc::ProtocolError, "handshake: a message of the wrong size");
  if (std::memcmp(bytes.data(), kMagic.data(), 4) != 0)
    return fail(Errc::ProtocolError, "handshake: bad magic");
  HandshakeMessage m;
  m.type = static_cast<std::uint8_t>(bytes[4]);
  if (m.type != expected_type)
    return fail(Errc::ProtocolError, "handshake: message type " + std::to_string(m.type) + " where " +
                                         std::to_string(expected_type) + " was expected");
  std::memcpy(&m.rank, bytes.data() + 8, 4);
  std::memcpy(&m.world, bytes.data() + 12, 4);
  std::memcpy(m.nonce.data(), bytes.data() + 16, m.nonce.size());
  std::memcpy(m.mac.data(), bytes.data() + 48, m.mac.size());
  std::memcpy(m.descriptor.data(), bytes.data() + 80, m.descriptor.size());
  return m;
}

Result<RemoteRegion> handshake_initiate(Context& context, Connection& connection,
                                        const HandshakeConfig& config, int self, int expected,
                                        const RemoteRegion& mine) {
  Channel channel(connection, config.timeout);
  if (auto ok = channel.open(context); !ok) return std::unexpected(ok.error());
  auto first = channel.post_recv(0);
  auto third = first ? channel.post_recv(1) : first;
  if (!third) return std::unexpected(third.error());
  auto challenge = channel.receive(*first, 0, kChallenge);
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
  if (auto ok = channel.send(2, proof); !ok) return std::unexpected(ok.error());
  auto accept = channel.receive(*third, 1, kAccept);
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
  if (auto ok = channel.send(3, descriptor); !ok) return std::unexpected(ok.error());
  channel.finish();
  return *theirs;
}

Result<ProvenPeer> handshake_accept(Context& context, Connection& connection, const HandshakeConfig& config,
                                    int self, const RemoteRegion& mine,
                                    const std::function<bool(int)>& acceptable) {
  Channel channel(connection, config.timeout);
  if (auto ok = channel.open(context); !ok) return std::unexpected(ok.error());
  auto second = channel.post_recv(0);
  auto fourth = second ? channel.post_recv(1) : second;
  if (!fourth) return std::unexpected(fourth.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  HandshakeMessage challenge{.type = kChallenge,
                             .rank = static_cast<std::uint32_t>(self),
                             .world = static_cast<std::uint32_t>(config.world),
                             .nonce = *nonce};
  if (auto ok = channel.send(2, challenge); !ok) return std::unexpected(ok.error());
  auto proof = channel.receive(*second, 0, kProof);
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
  if (auto ok = channel.send(3, accept); !ok) return std::unexpected(ok.error());
  auto descriptor = channel.receive(*fourth, 1, kDescriptor);
  if (!descriptor) return std::unexpected(descriptor.error());
  if (!auth::verify(t.mac("descriptor", view(descriptor->descriptor)), descriptor->mac))
    return std::unexpected(unproven("rank " + std::to_string(rank)));
  auto theirs = RemoteRegion::deserialize(descriptor->descriptor);
  if (!theirs) return std::unexpected(theirs.error());
  channel.finish();
  return ProvenPeer{rank, *theirs};
}

}  // namespace rdmakit::coll::detail
