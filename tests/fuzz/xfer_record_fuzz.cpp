// The transfer engine's segment record, which peers read from the metadata store (anyone who can write
// the store can put bytes there): decode() on raw bytes. A record that is accepted must encode back to
// bytes that decode to the same record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "xfer/engine/record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::xfer::detail;
  if (auto record = decode(std::as_bytes(std::span(data, size)))) {
    auto again = decode(encode(*record));
    if (!again || !(*again == *record)) std::abort();
  }
  return 0;
}
