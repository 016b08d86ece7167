// Who is at the other end of a communicator connection: both ranks prove the job secret over the
// freshly made connection before either learns the other's staging descriptor. Four 128-byte messages
// over the one message channel (core/message_channel.hpp), the lower rank (A, which accepted) speaking first
// so the initiator never sends into a connection whose receives may not be posted yet:
//   1 A -> I  challenge:  rank a, nonce_a
//   2 I -> A  proof:      rank i, nonce_i, HMAC(secret, "initiator" | job | world | a | i | nonce_a |
//   nonce_i) 3 A -> I  accept:     HMAC(secret, "acceptor" | ... | descriptor_a), descriptor_a 4 I -> A
//   descriptor: HMAC(secret, "descriptor" | ... | descriptor_i), descriptor_i
// The peer's rank is the one the MAC binds, never a name it claims; a connection that fails any check is
// closed having learnt nothing but a nonce. The nonces from both sides make a recorded exchange useless.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "bootstrap/auth.hpp"
#include "core/message_channel.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::detail {

struct HandshakeConfig {
  std::string secret;  // empty: the job has none (the MACs then bind but do not authenticate)
  std::string job;     // what the ranks agree on: key prefix and fabric kind
  int world = 0;
  std::chrono::milliseconds timeout{};
};

// The wire form of one message: a frame of the one message channel (core/message_channel.hpp) whose
// payload is rank, world, nonce, MAC and descriptor (pure; the decoder is what a stranger's bytes meet
// first).
struct HandshakeMessage {
  std::uint8_t type = 0;
  std::uint32_t rank = 0;
  std::uint32_t world = 0;
  bootstrap::auth::Nonce nonce{};
  bootstrap::auth::Mac mac{};
  RemoteRegion::Bytes descriptor{};

  static constexpr std::size_t kPayload = 8 + 32 + 32 + RemoteRegion::kSerializedSize;
  static constexpr std::size_t kSize = rdmakit::detail::kFrameHeader + kPayload;
  static const rdmakit::detail::FrameSpec kSpec;
  using Payload = std::array<std::byte, kPayload>;
  using Bytes = std::array<std::byte, kSize>;
  Payload payload() const noexcept;
  Bytes encode() const noexcept;  // the whole frame
  // Rejects a wrong size, magic, version or type.
  static Result<HandshakeMessage> decode(std::span<const std::byte> bytes, std::uint8_t expected_type);
  static Result<HandshakeMessage> from(const rdmakit::detail::Frame& frame);
};

// Initiator: `self` connected to `expected` (a lower rank). Returns the peer's staging descriptor.
Result<RemoteRegion> handshake_initiate(Context& context, Connection& connection,
                                        const HandshakeConfig& config, int self, int expected,
                                        const RemoteRegion& mine);

struct ProvenPeer {
  int rank = -1;
  RemoteRegion region;
};

// Acceptor: the peer's proven rank (one `acceptable` allows) and its staging descriptor.
Result<ProvenPeer> handshake_accept(Context& context, Connection& connection, const HandshakeConfig& config,
                                    int self, const RemoteRegion& mine,
                                    const std::function<bool(int)>& acceptable);

}  // namespace rdmakit::coll::detail
