// libFuzzer target: the tcp handshake's hello (wire.hpp), as the listener decodes it from a stranger, and
// the escaping of the peer-supplied name before it reaches a log line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/log.hpp"
#include "transport/tcp/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  auto peer = rdmakit::tcp::decode_hello(bytes);
  if (!peer) return 0;
  // Accepted: the whole hello was there and the name fits the field it came in.
  if (size != sizeof(rdmakit::tcp::Hello) || peer->name.size() > sizeof(rdmakit::tcp::Hello::name))
    std::abort();
  for (char c : rdmakit::log::printable(peer->name)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) std::abort();  // a control byte would reach the log line
  }
  return 0;
}
