#include "xfer/metadata/resp.hpp"

namespace rdmakit::xfer::metadata::resp {
namespace {

using Parsed = Result<std::optional<Value>>;

std::unexpected<Error> malformed(std::string_view why) {
  return fail(Errc::ProtocolError,
              "a malformed RESP reply (" + std::string(why) + "; is this a Redis server?)");
}

// The line at `at` (without CRLF); nullopt while its end has not arrived. A bare LF or CR is malformed.
Result<std::optional<std::string_view>> line(std::string_view in, std::size_t& at) {
  auto end = in.find('\n', at);
  auto cr = in.find('\r', at);
  if (cr != std::string_view::npos && (end == std::string_view::npos || cr < end)) {
    if (cr + 1 >= in.size()) return std::nullopt;
    if (in[cr + 1] != '\n') return malformed("a CR without LF");
    auto text = in.substr(at, cr - at);
    at = cr + 2;
    return text;
  }
  if (end != std::string_view::npos) return malformed("an LF without CR");
  if (in.size() - at > 64 * 1024) return malformed("a line over 64 KiB");
  return std::nullopt;
}

Result<std::int64_t> integer(std::string_view text) {
  bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty() || text.size() > 18) return malformed("a bad integer");
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return malformed("a bad integer");
    value = value * 10 + (c - '0');
  }
  return negative ? -value : value;
}

Parsed parse_at(std::string_view in, std::size_t& at, int depth) {
  if (at >= in.size()) return std::nullopt;
  if (depth > kMaxDepth) return malformed("arrays nested too deep");
  char type = in[at];
  std::size_t cursor = at + 1;
  auto text = line(in, cursor);
  if (!text) return std::unexpected(text.error());
  if (!*text) return std::nullopt;
  Value value;
  switch (type) {
    case '+':
    case '-':
      value.kind = type == '+' ? Value::Kind::Simple : Value::Kind::Error;
      value.text = std::string(**text);
      break;
    case ':': {
      auto number = integer(**text);
      if (!number) return std::unexpected(number.error());
      value.kind = Value::Kind::Integer;
      value.integer = *number;
      break;
    }
    case '$': {
      auto length = integer(**text);
      if (!length) return std::unexpected(length.error());
      if (*length == -1) break;  // Nil
      if (*length < 0 || static_cast<std::uint64_t>(*length) > kMaxBulk)
        return malformed("a bad bulk length");
      auto size = static_cast<std::size_t>(*length);
      if (in.size() - cursor < size + 2) return std::nullopt;
      if (in.substr(cursor + size, 2) != "\r\n") return malformed("a bulk string without its CRLF");
      value.kind = Value::Kind::Bulk;
      value.text = std::string(in.substr(cursor, size));
      cursor += size + 2;
      break;
    }
    case '*': {
      auto count = integer(**text);
      if (!count) return std::unexpected(count.error());
      if (*count == -1) break;  // a nil array
      if (*count < 0 || static_cast<std::uint64_t>(*count) > kMaxElements)
        return malformed("a bad array length");
      value.kind = Value::Kind::Array;
      for (std::int64_t i = 0; i < *count; ++i) {
        auto element = parse_at(in, cursor, depth + 1);
        if (!element) return element;
        if (!*element) return std::nullopt;
        value.elements.push_back(std::move(**element));
      }
      break;
    }
    default:
      return malformed("an unknown type byte");
  }
  at = cursor;
  return value;
}

}  // namespace

std::string command(const std::vector<std::string_view>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (auto arg : args) {
    out += "$" + std::to_string(arg.size()) + "\r\n";
    out.append(arg);
    out += "\r\n";
  }
  return out;
}

Result<std::optional<Value>> parse(std::string_view in, std::size_t& consumed) {
  std::size_t at = 0;
  auto value = parse_at(in, at, 0);
  if (value && *value) consumed = at;
  return value;
}

Result<std::optional<std::vector<Value>>> parse_many(std::string_view in, std::size_t count,
                                                     std::size_t& consumed) {
  std::vector<Value> values;
  std::size_t at = 0;
  while (values.size() < count) {
    auto value = parse_at(in, at, 0);
    if (!value) return std::unexpected(value.error());
    if (!*value) return std::nullopt;
    values.push_back(std::move(**value));
  }
  consumed = at;
  return values;
}

}  // namespace rdmakit::xfer::metadata::resp
