// The tcp transport's wire format. Every frame starts with a 48-byte header; WRITE, SEND and READ
// responses are followed by their payload, which moves straight between the socket and registered memory.
// Fields are little-endian (x86 and arm64 hosts; a static_assert guards the assumption).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "rdmakit/connection.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::tcp {

static_assert(std::endian::native == std::endian::little, "the tcp wire format assumes a little-endian host");

enum class FrameType : std::uint8_t {
  // Requests, initiator -> target.
  Write = 1,
  WriteImm,
  Read,
  CompareSwap,
  FetchAdd,
  Send,
  SendImm,
  // Responses, target -> initiator, one per request and in request order.
  Ack = 16,        // cumulative: every WRITE, WRITE_IMM and SEND up to `sequence` is done
  ReadResponse,    // followed by `length` bytes
  AtomicResponse,  // operand1 = the old value
  Nak,             // status = why; the target fails the connection after sending it
};

// Flags of a request frame.
// kFrameAcks: the request also carries a cumulative ACK of the peer's requests, up to `operand2` (the
// target side's ACK rides on its next request instead of a frame of its own: one system call less per
// message each way in a ping-pong). Never on a CompareSwap, whose operand2 is the value to swap in.
constexpr std::uint16_t kFrameAcks = 1;

struct FrameHeader {
  FrameType type;
  std::uint8_t status;   // Nak: a rdmakit::Status
  std::uint16_t flags;   // requests: kFrameAcks or 0; responses: 0
  std::uint32_t length;  // payload bytes (WRITE/SEND/READ response) or bytes asked (READ)
  std::uint64_t addr;    // remote address of one-sided requests
  std::uint32_t rkey;
  std::uint32_t imm;
  std::uint64_t operand1;  // CompareSwap: expected; FetchAdd: addend; AtomicResponse: old value
  std::uint64_t operand2;  // CompareSwap: desired; a request with kFrameAcks: the sequence it ACKs
  std::uint64_t sequence;  // requests: the initiator's sequence; responses echo it
};
static_assert(sizeof(FrameHeader) == 48);

constexpr bool is_request(FrameType type) noexcept {
  return type >= FrameType::Write && type <= FrameType::SendImm;
}
constexpr bool is_response(FrameType type) noexcept {
  return type >= FrameType::Ack && type <= FrameType::Nak;
}
constexpr bool carries_request_payload(FrameType type) noexcept {
  return type == FrameType::Write || type == FrameType::WriteImm || type == FrameType::Send ||
         type == FrameType::SendImm;
}

// Sent by both sides right after the TCP connection is made.
struct Hello {
  std::uint32_t magic;    // kHelloMagic
  std::uint16_t version;  // kWireVersion
  std::uint16_t name_length;
  std::uint64_t id;
  std::uint64_t epoch;
  char name[232];  // not NUL-terminated; name_length bytes are valid
};
static_assert(sizeof(Hello) == 256);
constexpr std::uint32_t kHelloMagic = 0x544b4452;  // "RDKT"
constexpr std::uint16_t kWireVersion = 2;          // 2: ACKs may ride on requests (kFrameAcks)

// Largest payload of one operation: the length field is 32 bits, and verbs' limit is 2^31.
constexpr std::uint64_t kMaxMessageSize = std::uint64_t{1} << 31;

// ---- Decoding what a peer sent: pure functions, no I/O (the fuzz targets call them as the transport does).

// Our hello, from who we are.
Hello encode_hello(const PeerInfo& self);
// A peer's hello (exactly sizeof(Hello) bytes): who it says it is, or why it is not a hello we speak.
// The address is not part of it (the caller knows the socket).
Result<PeerInfo> decode_hello(std::span<const std::byte> bytes);
// The checks every frame header passes before it is acted on: a known type, a valid status in a NAK, a
// length within kMaxMessageSize, no flags but kFrameAcks on a request that may carry it. Keys, bounds and
// rights are the registration table's to check.
Result<void> check_frame_header(const FrameHeader& header);
// A frame header from raw bytes (exactly sizeof(FrameHeader)), checked.
Result<FrameHeader> decode_frame_header(std::span<const std::byte> bytes);

}  // namespace rdmakit::tcp
