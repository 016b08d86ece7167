// The transfer engine's segment record, which peers read from the metadata store (anyone who can write
// the store can put bytes there). Three paths over the same bytes:
//   - open_sealed() on raw bytes (what a reader does first): never crashes, and a forgery never opens;
//   - decode() of the body: a record that is accepted must encode back to bytes that decode to the same
//     record;
//   - such a record sealed and opened again (and refused under another name) comes back unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "xfer/engine/record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::xfer::detail;
  constexpr std::string_view kSecret = "the fuzzer's secret, 16+ chars";
  auto bytes = std::as_bytes(std::span(data, size));
  // Random bytes are not a valid AES-GCM tag under our key (2^-128): an opened one means the check broke.
  if (open_sealed(bytes, "kv", kSecret)) std::abort();
  if (auto record = decode(bytes)) {
    auto again = decode(encode(*record));
    if (!again || !(*again == *record)) std::abort();
    auto sealed = seal(*record, "kv", kSecret);
    if (!sealed) std::abort();
    auto opened = open_sealed(*sealed, "kv", kSecret);
    if (!opened || !(*opened == *record)) std::abort();
    if (open_sealed(*sealed, "kw", kSecret)) std::abort();
  }
  return 0;
}
