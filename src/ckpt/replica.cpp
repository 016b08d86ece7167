#include "ckpt/replica.hpp"

#include <charconv>
#include <cstdio>
#include <cstring>

#include "bootstrap/auth.hpp"
#include "ckpt/checksum.hpp"
#include "ckpt/io.hpp"
#include "ckpt/manifest.hpp"

namespace rdmakit::ckpt::detail {
namespace {

constexpr std::size_t kFields = 40;  // rank .. status, before the text

}  // namespace

// Version 2: the frame of the one message channel (version 1 was a 256-byte block with its own header).
const rdmakit::detail::FrameSpec kReplicaSpec{
    .name = "ckpt replica",
    .magic = 0x504b4352,  // "RCKP"
    .version = 2,
    .max_type = static_cast<std::uint8_t>(MessageType::ProgressReply),
    .max_payload = kFields + kMessageText - 1};

std::span<const std::byte> encode_payload(const Message& m, std::span<std::byte> out) {
  rdmakit::detail::PayloadWriter writer(out);
  writer.put(m.rank)
      .put(m.world_size)
      .put(m.step)
      .put(m.bytes)
      .put(m.manifest_bytes)
      .put(m.slot)
      .put(m.status);
  writer.put_text(std::string_view(m.text).substr(0, kMessageText - 1));
  return writer.written();
}

std::vector<std::byte> encode_message(const Message& m) {
  std::array<std::byte, kMessageBytes> payload;
  std::vector<std::byte> out(kReplicaSpec.max_frame());
  auto size = rdmakit::detail::encode_frame(kReplicaSpec, static_cast<std::uint8_t>(m.type),
                                            encode_payload(m, payload), out);
  out.resize(size.value_or(0));
  return out;
}

Result<Message> decode_payload(const rdmakit::detail::Frame& frame) {
  Message m{.type = static_cast<MessageType>(frame.type)};
  rdmakit::detail::PayloadReader in(kReplicaSpec, frame.payload);
  in.get(m.rank).get(m.world_size).get(m.step).get(m.bytes).get(m.manifest_bytes).get(m.slot).get(m.status);
  auto text = in.rest();  // at most kMessageText - 1 bytes: the spec bounds the payload
  if (auto ok = in.finish(); !ok) return std::unexpected(ok.error());
  m.text.assign(reinterpret_cast<const char*>(text.data()), text.size());
  return m;
}

Result<Message> decode_message(const std::byte* data, std::size_t size) {
  auto frame = rdmakit::detail::decode_frame(kReplicaSpec, std::span(data, size));
  if (!frame) return std::unexpected(frame.error());
  return decode_payload(*frame);
}

std::string rank_identity(std::uint32_t rank) { return "rank " + std::to_string(rank); }

std::optional<std::uint32_t> parse_rank_identity(std::string_view identity) {
  constexpr std::string_view kPrefix = "rank ";
  if (!identity.starts_with(kPrefix) || identity.size() == kPrefix.size()) return std::nullopt;
  std::uint32_t rank = 0;
  const char* end = identity.data() + identity.size();
  auto [at, ec] = std::from_chars(identity.data() + kPrefix.size(), end, rank);
  if (ec != std::errc() || at != end || rank_identity(rank) != identity) return std::nullopt;  // canonical
  return rank;
}

std::string host_of(std::string_view address) {
  if (address.starts_with('[')) {
    auto close = address.find(']');
    return std::string(address.substr(1, close == std::string_view::npos ? address.npos : close - 1));
  }
  auto colon = address.rfind(':');
  return std::string(colon == std::string_view::npos ? address : address.substr(0, colon));
}

std::string manifest_mac(std::string_view secret, std::uint32_t rank, std::uint32_t world_size,
                         std::uint64_t step, std::string_view manifest_text) {
  auto mac = bootstrap::auth::mac(secret, {"rdmakit-ckpt-replica-manifest/v1", std::to_string(rank),
                                           std::to_string(world_size), std::to_string(step), manifest_text});
  std::string hex;
  for (auto b : mac) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", b);
    hex += two;
  }
  return hex;
}

std::uint64_t replica_slot_bytes(std::uint64_t state_bytes) {
  return round_up(state_bytes, kIoAlignment) + kReplicaManifestArea;
}

}  // namespace rdmakit::ckpt::detail
