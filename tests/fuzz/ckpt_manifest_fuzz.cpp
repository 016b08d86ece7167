// A checkpoint manifest as read from disk or from a replica server's memory (src/ckpt/manifest.hpp):
// decode_manifest, then the properties a decoded manifest must have: it passes check_manifest, it re-encodes
// to a text that decodes again to the same encoding, and describe_manifest (what `rdmakit-ckpt show`
// prints) puts no control byte on the terminal but its own line ends.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ckpt/manifest.hpp"
#include "rdmakit/ckpt/store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::ckpt;
  auto manifest = detail::decode_manifest(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!manifest) return 0;
  if (!detail::check_manifest(*manifest)) std::abort();
  auto text = detail::encode_manifest(*manifest);
  auto again = detail::decode_manifest(text);
  if (!again || detail::encode_manifest(*again) != text) std::abort();
  for (unsigned char c : describe_manifest(*manifest))
    if ((c < 0x20 && c != '\n') || c == 0x7f) std::abort();
  return 0;
}
