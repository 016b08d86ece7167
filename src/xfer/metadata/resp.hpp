// RESP (the Redis serialization protocol, version 2): commands out, replies in. The decoder takes bytes
// from the network: malformed or oversized input is an error, never a crash (tests/fuzz/xfer_wire_fuzz.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/error.hpp"

namespace rdmakit::xfer::metadata::resp {

struct Value {
  enum class Kind { Simple, Error, Integer, Bulk, Nil, Array };
  Kind kind = Kind::Nil;
  std::string text;  // Simple, Error, Bulk
  std::int64_t integer = 0;
  std::vector<Value> elements;  // Array
};

// Bounds of what a reply may claim before we buffer it.
constexpr std::size_t kMaxBulk = 64u << 20;
constexpr std::size_t kMaxElements = 1u << 20;
constexpr int kMaxDepth = 8;

// A command as an array of bulk strings (binary-safe).
std::string command(const std::vector<std::string_view>& args);

// Decodes the value at the front of `in`: nullopt while incomplete (`consumed` untouched), else the value
// and the bytes it took. Errc::ProtocolError for anything that is not RESP.
Result<std::optional<Value>> parse(std::string_view in, std::size_t& consumed);

// Decodes `count` values in a row (a pipeline's replies), the same way.
Result<std::optional<std::vector<Value>>> parse_many(std::string_view in, std::size_t count,
                                                     std::size_t& consumed);

}  // namespace rdmakit::xfer::metadata::resp
