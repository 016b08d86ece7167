// Encoding and checking of the tcp wire format's hello and frame headers (wire.hpp).
#include "transport/tcp/wire.hpp"

#include <algorithm>
#include <cstring>

#include "rdmakit/error.hpp"

namespace rdmakit::tcp {

Hello encode_hello(const PeerInfo& self) {
  Hello hello{};
  hello.magic = kHelloMagic;
  hello.version = kWireVersion;
  hello.name_length = static_cast<std::uint16_t>(std::min(self.name.size(), sizeof(hello.name)));
  hello.id = self.id;
  hello.epoch = self.epoch;
  std::memcpy(hello.name, self.name.data(), hello.name_length);
  return hello;
}

Result<PeerInfo> decode_hello(std::span<const std::byte> bytes) {
  if (bytes.size() != sizeof(Hello))
    return fail(Errc::ProtocolError, "handshake: " + std::to_string(bytes.size()) + " bytes, a hello has " +
                                         std::to_string(sizeof(Hello)));
  Hello theirs;
  std::memcpy(&theirs, bytes.data(), sizeof(theirs));
  if (theirs.magic != kHelloMagic)
    return fail(Errc::ConnectionRefused, "the peer is not an rdmakit tcp endpoint (bad handshake magic)");
  if (theirs.version != kWireVersion)
    return fail(Errc::ConnectionRefused, "the peer speaks tcp wire version " +
                                             std::to_string(theirs.version) + ", this side " +
                                             std::to_string(kWireVersion));
  if (theirs.name_length > sizeof(theirs.name))
    return fail(Errc::ProtocolError, "handshake: name of " + std::to_string(theirs.name_length) +
                                         " bytes, at most " + std::to_string(sizeof(theirs.name)) + " fit");
  PeerInfo peer;
  peer.name.assign(theirs.name, theirs.name_length);
  peer.id = theirs.id;
  peer.epoch = theirs.epoch;
  return peer;
}

Result<void> check_frame_header(const FrameHeader& header) {
  if (!is_request(header.type) && !is_response(header.type))
    return fail(Errc::ProtocolError,
                "an unknown frame type " + std::to_string(static_cast<int>(header.type)));
  if (header.type == FrameType::Nak && (header.status == static_cast<std::uint8_t>(Status::Success) ||
                                        header.status > static_cast<std::uint8_t>(Status::GeneralError)))
    return fail(Errc::ProtocolError, "a NAK with an invalid status " + std::to_string(header.status));
  if (header.flags != 0 &&
      (header.flags != kFrameAcks || !is_request(header.type) || header.type == FrameType::CompareSwap))
    return fail(Errc::ProtocolError, "flags " + std::to_string(header.flags) + " on a frame of type " +
                                         std::to_string(static_cast<int>(header.type)));
  if (header.length > kMaxMessageSize)
    return fail(Errc::ProtocolError, "a frame of " + std::to_string(header.length) +
                                         " bytes, more than the " + std::to_string(kMaxMessageSize) +
                                         " an operation can carry");
  return {};
}

Result<FrameHeader> decode_frame_header(std::span<const std::byte> bytes) {
  if (bytes.size() != sizeof(FrameHeader))
    return fail(Errc::ProtocolError, "a frame header of " + std::to_string(bytes.size()) + " bytes");
  FrameHeader header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (auto ok = check_frame_header(header); !ok) return std::unexpected(ok.error());
  return header;
}

}  // namespace rdmakit::tcp
