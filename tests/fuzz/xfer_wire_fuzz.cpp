// libFuzzer target: what a metadata server (or anyone listening where one was expected) sends the transfer
// engine's metadata backends (src/xfer/metadata): the RESP decoder (redis), the HTTP/1.1 response decoder,
// the JSON reader and base64 (etcd). The input goes whole to each decoder; a decoded HTTP body also goes to
// the JSON reader, as the etcd backend does. Properties: a decoder that says "complete" consumed no more
// than it was given, and re-decoding that prefix gives the same answer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "xfer/metadata/http.hpp"
#include "xfer/metadata/resp.hpp"

using namespace rdmakit::xfer::metadata;

namespace {

void check_resp(std::string_view in) {
  std::size_t consumed = 0;
  auto value = resp::parse(in, consumed);
  if (!value || !*value) return;
  if (consumed == 0 || consumed > in.size()) __builtin_trap();
  std::size_t again = 0;
  auto prefix = resp::parse(in.substr(0, consumed), again);
  if (!prefix || !*prefix || again != consumed) __builtin_trap();
  std::size_t many = 0;
  (void)resp::parse_many(in, 3, many);
}

void check_http(std::string_view in) {
  std::size_t consumed = 0;
  auto response = http::parse_response(in, consumed);
  if (!response || !*response) return;
  if (consumed == 0 || consumed > in.size() || (*response)->body.size() > consumed) __builtin_trap();
  if (auto value = json::parse((*response)->body); value) (void)value->find("kvs");
}

void check_json(std::string_view in) {
  auto value = json::parse(in);
  if (value && value->kind == json::Value::Kind::String) {
    // A string re-quoted parses back to itself.
    auto again = json::parse(json::quote(value->text));
    if (!again || again->text != value->text) __builtin_trap();
  }
}

void check_base64(std::string_view in) {
  auto decoded = base64::decode(in);
  if (decoded && base64::encode(*decoded) != in) __builtin_trap();  // only canonical text decodes
  if (base64::decode(base64::encode(in)) != std::string(in)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(bytes), size);
  check_resp(in);
  check_http(in);
  check_json(in);
  check_base64(in);
  return 0;
}
