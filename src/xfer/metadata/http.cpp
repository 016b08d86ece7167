#include "xfer/metadata/http.hpp"

#include <algorithm>
#include <cctype>

namespace rdmakit::xfer::metadata::http {
namespace {

std::unexpected<Error> malformed(std::string_view why) {
  return fail(Errc::ProtocolError,
              "a malformed HTTP response (" + std::string(why) + "; is this an etcd server?)");
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// A decimal (or, for chunk sizes, hexadecimal) number that fits the body limit.
std::optional<std::size_t> number(std::string_view text, int base) {
  if (text.empty() || text.size() > 16) return std::nullopt;
  std::size_t value = 0;
  for (char c : text) {
    int digit = c >= '0' && c <= '9'                 ? c - '0'
                : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10
                : base == 16 && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                     : -1;
    if (digit < 0) return std::nullopt;
    value = value * static_cast<std::size_t>(base) + static_cast<std::size_t>(digit);
  }
  if (value > kMaxBody) return std::nullopt;
  return value;
}

struct Head {
  int status = 0;
  std::optional<std::size_t> content_length;
  bool chunked = false;
};

Result<Head> parse_head(std::string_view head) {
  Head parsed;
  auto end = head.find("\r\n");
  std::string_view status_line = head.substr(0, end);
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ')
    return malformed("no HTTP/1.x status line");
  auto code = number(status_line.substr(9, 3), 10);
  if (!code || *code < 100 || *code > 599) return malformed("a bad status code");
  parsed.status = static_cast<int>(*code);
  while (end != std::string_view::npos) {
    auto start = end + 2;
    end = head.find("\r\n", start);
    auto field = head.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (field.empty()) continue;
    auto colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0) return malformed("a header line without a name");
    auto name = field.substr(0, colon);
    auto value = trim(field.substr(colon + 1));
    if (iequals(name, "content-length")) {
      auto length = number(value, 10);
      if (!length || (parsed.content_length && *parsed.content_length != *length))
        return malformed("a bad Content-Length");
      parsed.content_length = length;
    } else if (iequals(name, "transfer-encoding")) {
      if (!iequals(value, "chunked")) return malformed("a transfer encoding other than chunked");
      parsed.chunked = true;
    }
  }
  if (parsed.chunked && parsed.content_length) return malformed("both chunked and a Content-Length");
  return parsed;
}

// A chunked body from `at`: nullopt while incomplete; sets `at` past the last chunk and its trailers.
Result<std::optional<std::string>> dechunk(std::string_view in, std::size_t& at) {
  std::string body;
  std::size_t cursor = at;
  for (;;) {
    auto line_end = in.find("\r\n", cursor);
    if (line_end == std::string_view::npos) {
      if (in.size() - cursor > 1024) return malformed("a chunk size line over 1 KiB");
      return std::nullopt;
    }
    auto size_text = in.substr(cursor, line_end - cursor);
    size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions are ignored
    auto size = number(trim(size_text), 16);
    if (!size || body.size() + *size > kMaxBody) return malformed("a bad chunk size");
    cursor = line_end + 2;
    if (*size == 0) break;
    if (in.size() - cursor < *size + 2) return std::nullopt;
    if (in.substr(cursor + *size, 2) != "\r\n") return malformed("a chunk without its CRLF");
    body.append(in.substr(cursor, *size));
    cursor += *size + 2;
  }
  // Trailer fields up to an empty line (etcd's gateway sends one for errors).
  for (;;) {
    auto line_end = in.find("\r\n", cursor);
    if (line_end == std::string_view::npos) {
      if (in.size() - cursor > kMaxHead) return malformed("trailers over 64 KiB");
      return std::nullopt;
    }
    bool empty = line_end == cursor;
    cursor = line_end + 2;
    if (empty) break;
  }
  at = cursor;
  return body;
}

}  // namespace

std::string post(std::string_view host, std::string_view path, std::string_view json_body,
                 std::string_view authorization) {
  std::string request =
      "POST " + std::string(path) + " HTTP/1.1\r\nHost: " + std::string(host) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(json_body.size()) + "\r\n";
  if (!authorization.empty()) request += "Authorization: " + std::string(authorization) + "\r\n";
  request += "\r\n";
  request.append(json_body);
  return request;
}

Result<std::optional<Response>> parse_response(std::string_view in, std::size_t& consumed) {
  auto head_end = in.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    if (in.size() > kMaxHead) return malformed("a head over 64 KiB");
    if (in.size() >= 7 && !in.starts_with("HTTP/1.")) return malformed("no HTTP/1.x status line");
    return std::nullopt;
  }
  if (head_end > kMaxHead) return malformed("a head over 64 KiB");
  auto head = parse_head(in.substr(0, head_end + 2));
  if (!head) return std::unexpected(head.error());
  if (head->status < 200) return malformed("an informational status");
  std::size_t at = head_end + 4;
  Response response{head->status, {}};
  if (head->chunked) {
    auto body = dechunk(in, at);
    if (!body) return std::unexpected(body.error());
    if (!*body) return std::nullopt;
    response.body = std::move(**body);
  } else if (head->content_length) {
    if (in.size() - at < *head->content_length) return std::nullopt;
    response.body = std::string(in.substr(at, *head->content_length));
    at += *head->content_length;
  } else if (head->status != 204 && head->status != 304) {
    return malformed("a body without a length");
  }
  consumed = at;
  return response;
}

}  // namespace rdmakit::xfer::metadata::http
