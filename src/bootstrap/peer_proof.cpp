#include "bootstrap/peer_proof.hpp"

#include <array>
#include <cstring>

#include "bootstrap/auth.hpp"

namespace rdmakit::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kMagic = "RKPP";
constexpr std::size_t kMessageSize = 192;
enum : std::uint8_t { kChallenge = 1, kProof = 2, kAccept = 3 };

// Layout: magic[4] type[1] pad[1] identity_length[2] nonce[32] mac[32] identity[118].
struct ProofMessage {
  std::uint8_t type = 0;
  auth::Nonce nonce{};
  auth::Mac mac{};
  std::string identity;

  std::array<std::byte, kMessageSize> encode() const {
    std::array<std::byte, kMessageSize> out{};
    std::memcpy(out.data(), kMagic.data(), 4);
    out[4] = static_cast<std::byte>(type);
    auto length = static_cast<std::uint16_t>(identity.size());
    std::memcpy(out.data() + 6, &length, 2);
    std::memcpy(out.data() + 8, nonce.data(), nonce.size());
    std::memcpy(out.data() + 40, mac.data(), mac.size());
    std::memcpy(out.data() + 72, identity.data(), identity.size());
    return out;
  }

  static Result<ProofMessage> decode(const std::byte* bytes, std::uint8_t expected) {
    if (std::memcmp(bytes, kMagic.data(), 4) != 0) return fail(Errc::ProtocolError, "peer proof: bad magic");
    ProofMessage m;
    m.type = static_cast<std::uint8_t>(bytes[4]);
    if (m.type != expected) return fail(Errc::ProtocolError, "peer proof: unexpected message type");
    std::uint16_t length = 0;
    std::memcpy(&length, bytes + 6, 2);
    if (length > kMaxPeerIdentity) return fail(Errc::ProtocolError, "peer proof: identity too long");
    std::memcpy(m.nonce.data(), bytes + 8, m.nonce.size());
    std::memcpy(m.mac.data(), bytes + 40, m.mac.size());
    m.identity.assign(reinterpret_cast<const char*>(bytes + 72), length);
    return m;
  }
};

// Three message buffers in one small region: receives in slots 0 and 1, sends in slot 2. A proof that does
// not finish closes the connection before the region goes, so no receive is left posted into freed memory.
class ProofChannel {
 public:
  ProofChannel(Connection& connection, std::chrono::milliseconds timeout)
      : connection_(&connection), deadline_(Clock::now() + timeout) {}
  ~ProofChannel() {
    if (!finished_) connection_->close();
  }
  ProofChannel(const ProofChannel&) = delete;
  ProofChannel& operator=(const ProofChannel&) = delete;

  Result<void> open(Context& context) {
    auto region = context.allocate(3 * kMessageSize, Access::LocalWrite);
    if (!region) return std::unexpected(region.error());
    region_ = std::move(*region);
    return {};
  }
  void finish() noexcept { finished_ = true; }
  Result<std::uint64_t> post_recv(int slot) { return connection_->post_recv(segment(slot)); }

  Result<ProofMessage> receive(std::uint64_t id, int slot, std::uint8_t type) {
    if (auto done = complete(id, "receive"); !done) return std::unexpected(done.error());
    return ProofMessage::decode(static_cast<const std::byte*>(region_->data()) + slot * kMessageSize, type);
  }

  Result<void> send(const ProofMessage& message) {
    auto bytes = message.encode();
    std::memcpy(static_cast<std::byte*>(region_->data()) + 2 * kMessageSize, bytes.data(), bytes.size());
    auto id = connection_->send(segment(2));
    if (!id) return std::unexpected(id.error());
    return complete(*id, "send");
  }

 private:
  Segment segment(int slot) const {
    return Segment{
        reinterpret_cast<std::uint64_t>(region_->data()) + static_cast<std::uint64_t>(slot) * kMessageSize,
        kMessageSize, region_->lkey()};
  }

  Result<void> complete(std::uint64_t id, const char* what) {
    auto left = std::max(deadline_ - Clock::now(), Clock::duration::zero());
    auto done = connection_->wait(id, std::chrono::duration_cast<std::chrono::milliseconds>(left));
    if (!done)
      return std::unexpected(
          Error(done.error().code(), std::string("peer proof ") + what + ": " + done.error().message()));
    if (!done->ok() || (Connection::is_recv_id(id) && done->bytes != kMessageSize))
      return fail(Errc::ProtocolError, std::string("peer proof ") + what + " failed (" +
                                           std::string(to_string(done->status)) + ")");
    return {};
  }

  Connection* connection_;
  Clock::time_point deadline_;
  std::shared_ptr<MemoryRegion> region_;
  bool finished_ = false;
};

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
  ProofChannel channel(connection, config.timeout);
  if (auto ok = channel.open(context); !ok) return std::unexpected(ok.error());
  auto first = channel.post_recv(0);
  auto third = first ? channel.post_recv(1) : first;
  if (!third) return std::unexpected(third.error());
  auto challenge = channel.receive(*first, 0, kChallenge);
  if (!challenge) return std::unexpected(challenge.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  ProofMessage proof{.type = kProof, .nonce = *nonce, .identity = std::string(identity)};
  proof.mac = initiator_mac(config, challenge->nonce, *nonce, identity);
  if (auto ok = channel.send(proof); !ok) return std::unexpected(ok.error());
  auto accept = channel.receive(*third, 1, kAccept);
  if (!accept)
    return fail(Errc::ConnectionRefused,
                "the peer refused this process's proof of the secret, or closed the connection (" +
                    accept.error().message() +
                    "): is RDMAKIT_JOB_SECRET the same on both sides, and are they the same user?");
  if (!auth::verify(acceptor_mac(config, challenge->nonce, *nonce, identity, accept->identity), accept->mac))
    return fail(Errc::ConnectionRefused,
                "the peer did not prove the secret (RDMAKIT_JOB_SECRET, or the same user)");
  channel.finish();
  return accept->identity;
}

Result<std::string> prove_accept(Context& context, Connection& connection, const PeerProofConfig& config,
                                 std::string_view identity,
                                 const std::function<Result<void>()>& before_accept) {
  if (auto ok = check_identity(identity); !ok) return std::unexpected(ok.error());
  ProofChannel channel(connection, config.timeout);
  if (auto ok = channel.open(context); !ok) return std::unexpected(ok.error());
  auto second = channel.post_recv(0);
  if (!second) return std::unexpected(second.error());
  auto nonce = auth::fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  if (auto ok = channel.send(ProofMessage{.type = kChallenge, .nonce = *nonce}); !ok)
    return std::unexpected(ok.error());
  auto proof = channel.receive(*second, 0, kProof);
  if (!proof) return std::unexpected(proof.error());
  if (!auth::verify(initiator_mac(config, *nonce, proof->nonce, proof->identity), proof->mac))
    return fail(Errc::ConnectionRefused, "a peer did not prove the secret (refused)");
  if (before_accept)
    if (auto ok = before_accept(); !ok) return std::unexpected(ok.error());
  ProofMessage accept{.type = kAccept, .identity = std::string(identity)};
  accept.mac = acceptor_mac(config, *nonce, proof->nonce, proof->identity, identity);
  if (auto ok = channel.send(accept); !ok) return std::unexpected(ok.error());
  channel.finish();
  return proof->identity;
}

}  // namespace rdmakit::bootstrap
