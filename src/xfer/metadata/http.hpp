// What the etcd backend needs of HTTP/1.1 and JSON: a POST request, a response decoder (Content-Length or
// chunked bodies), a small JSON reader and base64. The decoders take bytes from the network: malformed or
// oversized input is an error, never a crash (tests/fuzz/xfer_wire_fuzz.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/error.hpp"

namespace rdmakit::xfer::metadata {

namespace http {

constexpr std::size_t kMaxHead = 64 * 1024;
constexpr std::size_t kMaxBody = 64u << 20;

struct Response {
  int status = 0;
  std::string body;
};

// `authorization`: the value of an Authorization header (etcd's auth token); empty: none.
std::string post(std::string_view host, std::string_view path, std::string_view json_body,
                 std::string_view authorization = {});

// Decodes the response at the front of `in`: nullopt while incomplete, else the response and the bytes it
// took. A response needs a Content-Length or chunked body (etcd's gateway always sends one).
Result<std::optional<Response>> parse_response(std::string_view in, std::size_t& consumed);

}  // namespace http

namespace json {

struct Member;

// A parsed JSON value. Numbers keep their text (etcd sends 64-bit integers as strings anyway).
struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  std::string text;  // String (unescaped), Number (as written), Bool ("true"/"false")
  std::vector<Value> elements;
  std::vector<Member> members;  // in order; a repeated name: the last counts

  // The member `name` of an object, or nullptr.
  const Value* find(std::string_view name) const;
};

struct Member {
  std::string name;
  Value value;
};

constexpr int kMaxDepth = 32;

Result<Value> parse(std::string_view text);
// `text` as a JSON string literal, quotes included.
std::string quote(std::string_view text);

}  // namespace json

namespace base64 {
std::string encode(std::string_view bytes);
// nullopt for anything that is not canonical padded base64.
std::optional<std::string> decode(std::string_view text);
}  // namespace base64

}  // namespace rdmakit::xfer::metadata
