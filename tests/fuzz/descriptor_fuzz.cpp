// Remote descriptors: RemoteRegion::deserialize on raw bytes and from_hex on text. A descriptor that is
// accepted must serialize back to the same bytes (no field is dropped or invented on the way).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#include "rdmakit/memory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using rdmakit::RemoteRegion;
  auto bytes = std::as_bytes(std::span(data, size));
  if (auto region = RemoteRegion::deserialize(bytes)) {
    auto again = region->serialize();
    if (std::memcmp(again.data(), data, again.size()) != 0) std::abort();
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto region = RemoteRegion::from_hex(text)) {
    if (auto back = RemoteRegion::from_hex(region->to_hex());
        !back || back->serialize() != region->serialize())
      std::abort();
  }
  return 0;
}
