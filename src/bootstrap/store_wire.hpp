// The rendezvous store's wire format, shared by server and client. Little-endian host order (all ranks of
// a job run the same build).
//
// Connection setup (mutual proof of the job secret; nothing else is served before it):
//   client -> server  hello:  "RKS2" client_nonce(32)
//   server -> client  reply:  ok + server_nonce(32), or error + message (e.g. too many clients)
//   client -> server  proof:  HMAC(secret, "rdmakit-store/v2" | "client" | client_nonce | server_nonce)
//   server -> client  reply:  ok + HMAC(secret, ... "server" ...), or error + message, then close
// Then requests: op(1) key_length(4) value_length(4) key value, each answered by one reply.
// A reply is status(1) length(4) payload: Ok (SET: empty; GET: the value), NotFound (GET), Error (an
// Errc byte and the message; the request had no effect). GET never waits at the server: the client polls, so
// a client that gives up leaves nothing pending behind it.
// Leased keys (the transfer engine's metadata, src/xfer/metadata): mutable, each expiring unless renewed.
//   PUT    key, value = ttl_ms(4) + bytes   Ok; replaces a leased key, refused on a write-once key
//   RENEW  key, value = ttl_ms(4)           Ok, or NotFound when the key expired or was never put
//   ERASE  key                              Ok (also when absent); refused on a write-once key
//   LIST   key = a prefix                   Ok + (length(4) key)* of every live key with that prefix
// GET reads both kinds. A write-once key can never be replaced or erased through the leased ops.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "rdmakit/error.hpp"

namespace rdmakit::bootstrap::wire {

enum Op : std::uint8_t { kSet = 1, kGet = 2, kPut = 3, kRenew = 4, kErase = 5, kList = 6 };
// Bounds of a leased key's time to live.
constexpr std::uint32_t kMaxTtlMs = 24u * 3600 * 1000;
enum Status : std::uint8_t { kOk = 0, kNotFound = 1, kError = 2 };

constexpr std::string_view kHelloMagic = "RKS2";
constexpr std::size_t kHelloSize = 4 + 32;
constexpr std::size_t kProofSize = 32;
constexpr std::size_t kHeaderSize = 9;
constexpr std::size_t kReplyHeaderSize = 5;
constexpr std::string_view kMacLabel = "rdmakit-store/v2";

inline void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
inline std::uint32_t get_u32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline std::string request(Op op, std::string_view key, std::string_view value) {
  std::string out(1, static_cast<char>(op));
  put_u32(out, static_cast<std::uint32_t>(key.size()));
  put_u32(out, static_cast<std::uint32_t>(value.size()));
  out.append(key);
  out.append(value);
  return out;
}

inline void append_reply(std::string& out, Status status, std::string_view payload) {
  out.push_back(static_cast<char>(status));
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
}

// An Error reply's payload: the error code (1 byte, rdmakit::Errc) and the message.
inline void append_error(std::string& out, Errc code, std::string_view message) {
  out.push_back(static_cast<char>(kError));
  put_u32(out, static_cast<std::uint32_t>(message.size() + 1));
  out.push_back(static_cast<char>(code));
  out.append(message);
}

// Outcome of decoding the front of a byte stream.
enum class Decode { NeedMore, Ready, Bad };

struct Request {
  Op op = kGet;
  std::string_view key, value;  // views into the decoded buffer
  std::size_t size = 0;         // bytes the request takes
};

// Decodes one request at the front of `in`. Bad (with `error` set) for an unknown op or a key + value
// larger than `max_request` (known from the header alone, before the body arrives).
Decode decode_request(std::string_view in, std::size_t max_request, Request& out, std::string& error);

struct Reply {
  Status status = kOk;
  std::string_view payload;
  std::size_t size = 0;
};

// Decodes one reply at the front of `in`; Bad for an unknown status or a payload over `max_payload`.
Decode decode_reply(std::string_view in, std::size_t max_payload, Reply& out);

}  // namespace rdmakit::bootstrap::wire
