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

constexpr std::uint32_t kMagic = 0x504b4352;  // "RCKP"
constexpr std::uint16_t kVersion = 1;

template <typename T>
void put(MessageBytes& out, std::size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(value));
}
template <typename T>
T get(const std::byte* in, std::size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(value));
  return value;
}

}  // namespace

MessageBytes encode_message(const Message& m) {
  MessageBytes out{};
  put(out, 0, kMagic);
  put(out, 4, kVersion);
  put(out, 6, static_cast<std::uint16_t>(m.type));
  put(out, 8, m.rank);
  put(out, 12, m.world_size);
  put(out, 16, m.step);
  put(out, 24, m.bytes);
  put(out, 32, m.manifest_bytes);
  put(out, 40, m.slot);
  put(out, 44, m.status);
  std::memcpy(out.data() + 48, m.text.data(), std::min(m.text.size(), kMessageText - 1));
  return out;
}

Result<Message> decode_message(const std::byte* data, std::size_t size) {
  if (size != kMessageBytes)
    return fail(Errc::ProtocolError, "ckpt replica: message of " + std::to_string(size) + " bytes");
  if (get<std::uint32_t>(data, 0) != kMagic) return fail(Errc::ProtocolError, "ckpt replica: bad magic");
  if (get<std::uint16_t>(data, 4) != kVersion)
    return fail(Errc::NotSupported, "ckpt replica: protocol version " +
                                        std::to_string(get<std::uint16_t>(data, 4)) +
                                        " (this build speaks 1)");
  auto type = get<std::uint16_t>(data, 6);
  if (type < 1 || type > static_cast<std::uint16_t>(MessageType::FetchReply))
    return fail(Errc::ProtocolError, "ckpt replica: unknown message type " + std::to_string(type));
  const char* text = reinterpret_cast<const char*>(data + 48);
  auto length = ::strnlen(text, kMessageText);
  if (length == kMessageText) return fail(Errc::ProtocolError, "ckpt replica: unterminated text");
  return Message{.type = static_cast<MessageType>(type),
                 .rank = get<std::uint32_t>(data, 8),
                 .world_size = get<std::uint32_t>(data, 12),
                 .step = get<std::uint64_t>(data, 16),
                 .bytes = get<std::uint64_t>(data, 24),
                 .manifest_bytes = get<std::uint64_t>(data, 32),
                 .slot = get<std::uint32_t>(data, 40),
                 .status = get<std::uint32_t>(data, 44),
                 .text = std::string(text, length)};
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
