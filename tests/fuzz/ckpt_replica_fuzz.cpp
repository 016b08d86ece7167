// The checkpoint replica's control messages as a peer sends them (src/ckpt/replica.hpp): the first 256 bytes
// are decoded with decode_message; whatever follows is tried as a proven identity ("rank <r>") and as the
// descriptor hex a HelloReply carries. A message that decodes must re-encode to a message that decodes to
// the same fields; an identity that parses must be the canonical one of its rank.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ckpt/replica.hpp"
#include "rdmakit/memory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::ckpt::detail;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  auto message = decode_message(bytes, std::min(size, kMessageBytes));
  if (message) {
    if (message->text.size() >= kMessageText) std::abort();
    auto again = encode_message(*message);
    auto twice = decode_message(again.data(), again.size());
    if (!twice || twice->type != message->type || twice->rank != message->rank ||
        twice->step != message->step || twice->bytes != message->bytes ||
        twice->manifest_bytes != message->manifest_bytes || twice->slot != message->slot ||
        twice->status != message->status || twice->text != message->text)
      std::abort();
    (void)rdmakit::RemoteRegion::from_hex(message->text);
  }
  if (size > kMessageBytes) {
    std::string_view rest(reinterpret_cast<const char*>(data) + kMessageBytes, size - kMessageBytes);
    if (auto rank = parse_rank_identity(rest); rank && rank_identity(*rank) != rest) std::abort();
    (void)host_of(rest);
  }
  return 0;
}
