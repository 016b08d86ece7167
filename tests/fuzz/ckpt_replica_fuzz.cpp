// The checkpoint replica's control messages as a peer sends them (src/ckpt/replica.hpp): the input starts
// with one frame of the one message channel (as long as its header says, or the whole input), decoded
// with decode_message; whatever follows is tried as a proven identity ("rank <r>") and as the descriptor
// hex a HelloReply carries. A message that decodes must re-encode to the same bytes; an identity that
// parses must be the canonical one of its rank.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ckpt/replica.hpp"
#include "rdmakit/memory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::ckpt::detail;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  std::size_t length = size;
  if (size >= rdmakit::detail::kFrameHeader) {
    std::uint16_t payload = 0;
    std::memcpy(&payload, data + 6, 2);
    length = std::min(size, rdmakit::detail::kFrameHeader + payload);
  }
  auto message = decode_message(bytes, length);
  if (message) {
    if (message->text.size() >= kMessageText) std::abort();
    auto again = encode_message(*message);
    if (again.size() != length || std::memcmp(again.data(), bytes, length) != 0) std::abort();
    (void)rdmakit::RemoteRegion::from_hex(message->text);
  }
  if (size > length) {
    std::string_view rest(reinterpret_cast<const char*>(data) + length, size - length);
    if (auto rank = parse_rank_identity(rest); rank && rank_identity(*rank) != rest) std::abort();
    (void)host_of(rest);
  }
  return 0;
}
