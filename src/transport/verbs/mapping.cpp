#include "transport/verbs/mapping.hpp"

#include <algorithm>
#include <cstdio>

namespace rdmakit::verbs_impl {

Status map_status(ibv_wc_status status) noexcept {
  switch (status) {
    case IBV_WC_SUCCESS:
      return Status::Success;
    case IBV_WC_LOC_LEN_ERR:
      return Status::LocalLength;
    case IBV_WC_LOC_PROT_ERR:
      return Status::LocalProtection;
    case IBV_WC_LOC_QP_OP_ERR:
      return Status::LocalQpOperation;
    case IBV_WC_REM_ACCESS_ERR:
      return Status::RemoteAccess;
    case IBV_WC_REM_INV_REQ_ERR:
      return Status::RemoteInvalidRequest;
    case IBV_WC_REM_OP_ERR:
      return Status::RemoteOperation;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Status::RnrRetryExceeded;
    case IBV_WC_RETRY_EXC_ERR:
      return Status::TransportRetryExceeded;
    case IBV_WC_WR_FLUSH_ERR:
      return Status::Flushed;
    default:
      return Status::GeneralError;
  }
}

ibv_wr_opcode map_opcode(Opcode opcode, bool with_imm) noexcept {
  switch (opcode) {
    case Opcode::Write:
      return IBV_WR_RDMA_WRITE;
    case Opcode::WriteImm:
      return IBV_WR_RDMA_WRITE_WITH_IMM;
    case Opcode::Read:
      return IBV_WR_RDMA_READ;
    case Opcode::CompareSwap:
      return IBV_WR_ATOMIC_CMP_AND_SWP;
    case Opcode::FetchAdd:
      return IBV_WR_ATOMIC_FETCH_AND_ADD;
    default:
      return with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  }
}

std::optional<ibv_mtu> mtu_from_bytes(std::uint32_t bytes) noexcept {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return std::nullopt;
  }
}

std::uint32_t mtu_to_bytes(ibv_mtu mtu) noexcept {
  int code = static_cast<int>(mtu);
  return code >= IBV_MTU_256 && code <= IBV_MTU_4096 ? 128u << code : 0;
}

std::chrono::microseconds ack_timeout_duration(std::uint8_t exponent) noexcept {
  // 4.096 us * 2^exponent, in microseconds (rounded down).
  return std::chrono::microseconds((std::uint64_t{4096} << exponent) / 1000);
}

AckTimeout ack_timeout_for(std::chrono::milliseconds budget) noexcept {
  const auto budget_us = std::chrono::duration_cast<std::chrono::microseconds>(budget);
  for (std::uint8_t retries = 7;; --retries) {
    for (std::uint8_t exponent = 31; exponent >= 1; --exponent)
      if (ack_timeout_duration(exponent) * (retries + 1) <= budget_us) return {exponent, retries};
    if (retries == 0) return {1, 0};  // below ~8 us: the shortest bound verbs can express
  }
}

namespace {
// ibv_modify_qp(3): min_rnr_timer codes 1..31 in hundredths of a millisecond; code 0 is 655.36 ms.
constexpr std::array<std::uint32_t, 32> kRnrTimer10us = {
    65536, 1,   2,   3,   4,    6,    8,    12,   16,   24,   32,   48,    64,    96,    128,   192,
    256,   384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
}  // namespace

std::chrono::microseconds rnr_timer_duration(std::uint8_t code) noexcept {
  return std::chrono::microseconds(kRnrTimer10us[code & 31] * 10);
}

std::uint8_t rnr_timer_for(std::chrono::milliseconds budget) noexcept {
  // The responder's back-off: a sixth of the budget, so the sender's 6 retries fill it.
  const auto step = std::chrono::duration_cast<std::chrono::microseconds>(budget) / 6;
  std::uint8_t best = 1;
  for (std::uint8_t code = 1; code < 32; ++code)
    if (rnr_timer_duration(code) <= step) best = code;
  if (rnr_timer_duration(0) <= step) best = 0;  // 655 ms, the longest
  return best;
}

std::uint8_t rnr_retry_for(std::chrono::milliseconds budget, std::uint8_t peer_timer_code) noexcept {
  const auto step = rnr_timer_duration(peer_timer_code).count();
  const auto total = std::chrono::duration_cast<std::chrono::microseconds>(budget).count();
  auto retries = step > 0 ? total / step : 6;
  return static_cast<std::uint8_t>(std::clamp<long long>(retries, 1, 6));
}

std::string to_string(GidType type) {
  switch (type) {
    case GidType::IB:
      return "IB";
    case GidType::RoCEv1:
      return "RoCE v1";
    case GidType::RoCEv2:
      return "RoCE v2";
  }
  return "?";
}

bool is_zero(const Gid& gid) noexcept {
  return std::all_of(gid.begin(), gid.end(), [](std::uint8_t b) { return b == 0; });
}

std::optional<std::uint32_t> ipv4_of(const Gid& gid) noexcept {
  for (int i = 0; i < 10; ++i)
    if (gid[i] != 0) return std::nullopt;
  if (gid[10] != 0xff || gid[11] != 0xff) return std::nullopt;
  return (std::uint32_t{gid[12]} << 24) | (std::uint32_t{gid[13]} << 16) | (std::uint32_t{gid[14]} << 8) |
         gid[15];
}

std::string gid_text(const Gid& gid) {
  std::string text;
  char part[8];
  for (int i = 0; i < 16; i += 2) {
    std::snprintf(part, sizeof(part), "%02x%02x", gid[i], gid[i + 1]);
    if (i) text += ':';
    text += part;
  }
  return text;
}

std::optional<GidEntry> choose_gid(std::span<const GidEntry> gids, bool ethernet) noexcept {
  auto first = [&](auto&& pred) -> std::optional<GidEntry> {
    for (const GidEntry& e : gids)
      if (!is_zero(e.gid) && pred(e)) return e;
    return std::nullopt;
  };
  if (!ethernet) return first([](const GidEntry&) { return true; });
  if (auto v2v4 = first([](const GidEntry& e) { return e.type == GidType::RoCEv2 && ipv4_of(e.gid); }))
    return v2v4;
  if (auto v2 = first([](const GidEntry& e) { return e.type == GidType::RoCEv2; })) return v2;
  return first([](const GidEntry& e) { return e.type == GidType::RoCEv1; });
}

}  // namespace rdmakit::verbs_impl
