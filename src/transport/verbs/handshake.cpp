#include "transport/verbs/handshake.hpp"

#include <algorithm>

namespace rdmakit::verbs_impl {
namespace {

// Big-endian writer/reader over the fixed layout.
struct Writer {
  std::byte* at;
  void put(std::uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) *at++ = static_cast<std::byte>(value >> (8 * i));
  }
};
struct Reader {
  const std::byte* at;
  std::uint64_t get(int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value = (value << 8) | std::to_integer<std::uint8_t>(*at++);
    return value;
  }
};

std::string mtu_text(ibv_mtu mtu) { return std::to_string(mtu_to_bytes(mtu)); }

}  // namespace

Hello::Bytes Hello::encode() const noexcept {
  Bytes bytes{};
  Writer w{bytes.data()};
  w.put(kMagic, 4);
  w.put(version, 1);
  w.put((mtu_explicit ? 1u : 0u) | (rejected ? 2u : 0u), 1);
  w.put(static_cast<std::uint8_t>(mtu), 1);
  w.put(static_cast<std::uint8_t>(port_mtu), 1);
  w.put(context_id, 8);
  w.put(epoch, 8);
  for (std::uint8_t b : gid) w.put(b, 1);
  w.put(qpn, 4);
  w.put(psn, 4);
  w.put(timeout, 1);
  w.put(retry_cnt, 1);
  w.put(rnr_timer, 1);
  w.put(rnr_retry, 1);
  w.put(max_rd_atomic, 1);
  w.put(0, 1);
  w.put(lid, 2);
  return bytes;
}

Result<Hello> Hello::decode(std::span<const std::byte> bytes) {
  if (bytes.size() < kSize)
    return fail(Errc::ProtocolError, "verbs handshake: peer sent " + std::to_string(bytes.size()) +
                                         " bytes of private data, expected " + std::to_string(kSize) +
                                         " (is the peer an rdmakit verbs context?)");
  Reader r{bytes.data()};
  if (r.get(4) != kMagic)
    return fail(Errc::ProtocolError, "verbs handshake: bad magic in the peer's private data (not rdmakit)");
  Hello h;
  h.version = static_cast<std::uint8_t>(r.get(1));
  if (h.version != kVersion)
    return fail(Errc::ProtocolError, "verbs handshake: version mismatch: the peer speaks version " +
                                         std::to_string(h.version) + ", this side " +
                                         std::to_string(kVersion));
  auto flags = r.get(1);
  h.mtu_explicit = flags & 1;
  h.rejected = flags & 2;
  // Checked before the cast: an out-of-range value in an enum is undefined behaviour.
  auto mtu = r.get(1), port_mtu = r.get(1);
  auto valid = [](std::uint64_t code) { return code >= IBV_MTU_256 && code <= IBV_MTU_4096; };
  if (!valid(mtu) || !valid(port_mtu))
    return fail(Errc::ProtocolError, "verbs handshake: the peer sent an invalid mtu code");
  h.mtu = static_cast<ibv_mtu>(mtu);
  h.port_mtu = static_cast<ibv_mtu>(port_mtu);
  h.context_id = r.get(8);
  h.epoch = r.get(8);
  for (auto& b : h.gid) b = static_cast<std::uint8_t>(r.get(1));
  h.qpn = static_cast<std::uint32_t>(r.get(4));
  h.psn = static_cast<std::uint32_t>(r.get(4));
  h.timeout = static_cast<std::uint8_t>(r.get(1));
  h.retry_cnt = static_cast<std::uint8_t>(r.get(1));
  h.rnr_timer = static_cast<std::uint8_t>(r.get(1));
  h.rnr_retry = static_cast<std::uint8_t>(r.get(1));
  h.max_rd_atomic = static_cast<std::uint8_t>(r.get(1));
  r.get(1);
  h.lid = static_cast<std::uint16_t>(r.get(2));
  // Fields that go into ibv_modify_qp have a width there: a wider value is not the peer's meaning.
  if (h.psn > 0xffffff)
    return fail(Errc::ProtocolError, "verbs handshake: the peer's PSN is wider than 24 bits");
  if (h.timeout > 31 || h.rnr_timer > 31 || h.retry_cnt > 7 || h.rnr_retry > 7)
    return fail(Errc::ProtocolError, "verbs handshake: the peer's timeout or retry fields are out of range");
  return h;
}

Result<Negotiated> negotiate(const Hello& local, const Hello& peer) {
  auto refuse = [](std::string why) { return fail(Errc::ConnectionRefused, "verbs handshake: " + why); };
  if (local.mtu_explicit && peer.mtu_explicit && local.mtu != peer.mtu)
    return refuse("mtu mismatch: this side is configured for " + mtu_text(local.mtu) +
                  " bytes (RDMAKIT_MTU), the peer for " + mtu_text(peer.mtu) +
                  "; set the same mtu on both sides, or leave it unset on one of them to follow the other");
  if (local.mtu_explicit && local.mtu > peer.port_mtu)
    return refuse("mtu: this side is configured for " + mtu_text(local.mtu) +
                  " bytes (RDMAKIT_MTU), but the peer's port supports only " + mtu_text(peer.port_mtu));
  if (peer.mtu_explicit && peer.mtu > local.port_mtu)
    return refuse("mtu: the peer is configured for " + mtu_text(peer.mtu) +
                  " bytes, but this side's port supports only " + mtu_text(local.port_mtu) +
                  " (its active MTU)");
  if (is_zero(peer.gid)) return refuse("gid: the peer sent no GID (its port has no usable GID)");
  if (peer.qpn == 0 || peer.qpn > 0xffffff)
    return refuse("qpn: the peer sent an invalid QP number " + std::to_string(peer.qpn));
  Negotiated out;
  out.mtu = local.mtu_explicit  ? local.mtu
            : peer.mtu_explicit ? peer.mtu
                                : std::min(local.port_mtu, peer.port_mtu);
  out.max_rd_atomic = std::max<std::uint8_t>(1, std::min(local.max_rd_atomic, peer.max_rd_atomic));
  return out;
}

}  // namespace rdmakit::verbs_impl
