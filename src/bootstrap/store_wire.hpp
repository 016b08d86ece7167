// The rendezvous store's wire format, shared by server and client. Little-endian host order (all ranks of
// a job run the same build). Request: op(1) key_length(4) value_length(4) key value. Reply to SET: ok(1).
// Reply to GET: found(1) value_length(4) value. GET never waits at the server: the client polls, so a
// client that gives up leaves nothing pending behind it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rdmakit::bootstrap::wire {

enum Op : std::uint8_t { kSet = 1, kGet = 2 };
constexpr std::size_t kHeaderSize = 9;
constexpr std::uint32_t kMaxField = 64u << 20;  // a bigger key or value is a broken peer, not a real request

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

}  // namespace rdmakit::bootstrap::wire
