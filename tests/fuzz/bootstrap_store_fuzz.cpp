// libFuzzer target: the rendezvous store's server side as a stranger's bytes meet it.
//   * the pure decoders of requests and replies (store_wire.hpp) on the raw input;
//   * a server session (store_session.hpp) fed the input in pieces, unauthenticated: only the two
//     setup messages are legal, and nothing may be served;
//   * the same session after a valid proof, computed here from the input's hello, so the request path
//     (write-once and leased keys, caps, per-client output cap) runs on the rest of the input.
// Input layout for the third part: byte 0 picks the split points, then the bytes as a client sends them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_session.hpp"
#include "bootstrap/store_wire.hpp"

using namespace rdmakit::bootstrap;

namespace {

constexpr std::string_view kSecret = "fuzzing secret, 16+ chars";
constexpr StoreLimits kLimits{
    .max_bytes = 1 << 16, .max_request_bytes = 4096, .max_client_buffer_bytes = 8192, .max_clients = 4};

void decode_all(std::string_view in) {
  for (std::size_t at = 0; at < in.size();) {
    wire::Request request;
    std::string error;
    if (wire::decode_request(in.substr(at), kLimits.max_request_bytes, request, error) != wire::Decode::Ready)
      break;
    if (request.size == 0 || request.key.size() + request.value.size() + wire::kHeaderSize != request.size)
      __builtin_trap();
    at += request.size;
  }
  for (std::size_t at = 0; at < in.size();) {
    wire::Reply reply;
    if (wire::decode_reply(in.substr(at), 1 << 20, reply) != wire::Decode::Ready) break;
    at += reply.size;
  }
}

// Feeds `in` in pieces whose sizes come from `seed`; returns what the session answered.
std::string feed(StoreSession& session, StoreData& data, std::string_view in, std::uint8_t seed,
                 bool& closed) {
  std::string out;
  closed = false;
  for (std::size_t at = 0; at < in.size() && !closed;) {
    std::size_t piece = 1 + (seed * 31u + at) % 97;
    auto outcome = session.feed(in.substr(at, piece), data, out);
    closed = outcome != StoreSession::Outcome::Continue;
    at += piece;
    if (out.size() > kLimits.max_client_buffer_bytes + kLimits.max_request_bytes + 64) __builtin_trap();
    out.clear();  // the client read it
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(bytes), size);
  decode_all(in);
  if (size == 0) return 0;
  auth::Nonce server_nonce{};
  server_nonce[0] = bytes[0];

  // A stranger: whatever it sends, it is never authenticated and the store keeps nothing it sent.
  {
    StoreData data(kLimits);
    StoreSession session(std::string(kSecret), server_nonce);
    bool closed = false;
    feed(session, data, in.substr(1), bytes[0], closed);
    if (session.authenticated() || data.bytes() != 0) __builtin_trap();
  }

  // A client that knows the secret: a valid hello and proof, then the fuzzer's bytes as requests.
  {
    StoreData data(kLimits);
    StoreSession session(std::string(kSecret), server_nonce);
    std::string client_nonce(32, '\0');
    std::string hello = std::string(wire::kHelloMagic) + client_nonce;
    auto proof = auth::mac(kSecret, {wire::kMacLabel, "client", client_nonce, auth::bytes(server_nonce)});
    std::string out;
    if (session.feed(hello, data, out) != StoreSession::Outcome::Continue) __builtin_trap();
    out.clear();
    session.feed(std::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()), data, out);
    if (!session.authenticated()) __builtin_trap();
    bool closed = false;
    feed(session, data, in.substr(1), bytes[0], closed);
    if (data.bytes() > kLimits.max_bytes) __builtin_trap();
  }
  return 0;
}
