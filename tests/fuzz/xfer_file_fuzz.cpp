// libFuzzer target: what a peer sends on a file segment's connection (src/xfer/engine/files.hpp): the frame
// under kFileSpec, then a request (an owner decodes READ and WRITE messages from requesters) or an answer (a
// requester decodes the owner's). Properties: a frame that decodes lies inside the input; a request names
// 1 to kMaxFileSegmentName bytes and an answer's text keeps kMaxFileReplyText; what decodes re-encodes to
// the same payload, and that decodes to the same message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "core/message_channel.hpp"
#include "xfer/engine/files.hpp"

namespace {
using namespace rdmakit::xfer::detail;
using rdmakit::detail::Frame;

bool same_payload(const Frame& frame, const std::vector<std::byte>& encoded) {
  return encoded.size() == frame.payload.size() &&
         std::memcmp(encoded.data(), frame.payload.data(), encoded.size()) == 0;
}

void check_request(const Frame& frame) {
  auto request = decode_request(frame);
  if (!request) return;
  if (request->name.empty() || request->name.size() > kMaxFileSegmentName) std::abort();
  auto encoded = encode_request(*request);
  if (!encoded || !same_payload(frame, *encoded)) std::abort();
  auto again = decode_request(Frame{frame.type, *encoded});
  if (!again || again->id != request->id || again->offset != request->offset ||
      again->length != request->length || again->dest_addr != request->dest_addr ||
      again->dest_rkey != request->dest_rkey || again->dest_epoch != request->dest_epoch ||
      again->name != request->name || again->type != request->type)
    std::abort();
}

void check_reply(const Frame& frame) {
  auto reply = decode_reply(frame);
  if (!reply) return;
  if (reply->message.size() > kMaxFileReplyText) std::abort();
  auto encoded = encode_reply(*reply);
  if (!encoded || !same_payload(frame, *encoded)) std::abort();
  auto again = decode_reply(Frame{frame.type, *encoded});
  if (!again || again->id != reply->id || again->code != reply->code || again->message != reply->message)
    std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  auto frame = rdmakit::detail::decode_frame(kFileSpec, bytes);
  if (!frame) return 0;
  const auto* first = frame->payload.data();
  if (frame->payload.size() > kFileSpec.max_payload || first < bytes.data() ||
      first + frame->payload.size() > bytes.data() + bytes.size())
    std::abort();
  // Both decoders see every frame: each must refuse the other's types, not misread them.
  check_request(*frame);
  check_reply(*frame);
  return 0;
}
