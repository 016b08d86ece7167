// The one message channel's codec (src/core/message_channel.hpp) under each protocol that uses it: the
// first input byte picks the protocol (peer proof, the collectives' handshake, the checkpoint replica,
// rdmakit-perf's control), the rest is a frame as a peer sends it. A frame that decodes must lie inside the
// input, within the protocol's bound, and re-encode to the same bytes; its payload then goes through that
// protocol's own decoder, which must keep its own bounds (a proven identity's length, a text's).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "bootstrap/peer_proof.hpp"
#include "ckpt/replica.hpp"
#include "coll/handshake.hpp"
#include "core/message_channel.hpp"
#include "perf/control.hpp"

namespace {
using rdmakit::detail::Frame;
using rdmakit::detail::FrameSpec;

void payload_of(std::uint8_t protocol, const Frame& frame) {
  switch (protocol) {
    case 0:
      if (auto m = rdmakit::bootstrap::detail::decode_proof(frame);
          m && m->identity.size() > rdmakit::bootstrap::kMaxPeerIdentity)
        std::abort();
      return;
    case 1:
      (void)rdmakit::coll::detail::HandshakeMessage::from(frame);
      return;
    case 2:
      if (auto m = rdmakit::ckpt::detail::decode_payload(frame);
          m && m->text.size() >= rdmakit::ckpt::detail::kMessageText)
        std::abort();
      return;
    default:
      (void)rdmakit::perf::decode_payload(frame);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const FrameSpec* specs[] = {&rdmakit::bootstrap::detail::kProofSpec,
                              &rdmakit::coll::detail::HandshakeMessage::kSpec,
                              &rdmakit::ckpt::detail::kReplicaSpec, &rdmakit::perf::kControlSpec};
  const std::uint8_t protocol = data[0] % 4;
  const FrameSpec& spec = *specs[protocol];
  auto bytes = std::as_bytes(std::span(data + 1, size - 1));
  auto frame = rdmakit::detail::decode_frame(spec, bytes);
  if (!frame) return 0;
  const auto* first = frame->payload.data();
  if (frame->payload.size() > spec.max_payload || first < bytes.data() ||
      first + frame->payload.size() > bytes.data() + bytes.size())
    std::abort();
  std::vector<std::byte> again(spec.max_frame());
  auto written = rdmakit::detail::encode_frame(spec, frame->type, frame->payload, again);
  if (!written || *written != bytes.size() || std::memcmp(again.data(), bytes.data(), bytes.size()) != 0)
    std::abort();
  payload_of(protocol, *frame);
  return 0;
}
