// Pure translations between rdmakit's vocabulary and verbs': statuses, opcodes, access flags, MTUs,
// timeouts and GID choice. Plain functions over plain data, unit-tested without a device.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "rdmakit/completion.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::verbs_impl {

Status map_status(ibv_wc_status status) noexcept;
ibv_wr_opcode map_opcode(Opcode opcode, bool with_imm) noexcept;
// Access has ibv_access_flags' values: the mapping is the identity, checked at compile time.
constexpr int map_access(Access access) noexcept { return static_cast<int>(access); }
static_assert(map_access(Access::LocalWrite) == IBV_ACCESS_LOCAL_WRITE);
static_assert(map_access(Access::RemoteWrite) == IBV_ACCESS_REMOTE_WRITE);
static_assert(map_access(Access::RemoteRead) == IBV_ACCESS_REMOTE_READ);
static_assert(map_access(Access::RemoteAtomic) == IBV_ACCESS_REMOTE_ATOMIC);

// 256..4096 <-> IBV_MTU_256..IBV_MTU_4096; nullopt / 0 for anything else.
std::optional<ibv_mtu> mtu_from_bytes(std::uint32_t bytes) noexcept;
std::uint32_t mtu_to_bytes(ibv_mtu mtu) noexcept;

// The ack timeout exponent and retry count that make a silent peer fail within `budget`:
// (retry_cnt + 1) * 4.096us * 2^timeout <= budget, with the largest exponent that fits (fewer spurious
// retransmissions) and retry_cnt 7 unless the budget is too small for it. Exponent 0 means "wait
// forever" in verbs, so it is never returned.
struct AckTimeout {
  std::uint8_t timeout;    // ibv_qp_attr::timeout
  std::uint8_t retry_cnt;  // ibv_qp_attr::retry_cnt
};
AckTimeout ack_timeout_for(std::chrono::milliseconds budget) noexcept;
std::chrono::microseconds ack_timeout_duration(std::uint8_t exponent) noexcept;

// The min_rnr_timer code (ibv_modify_qp's table) a responder advertises for a sender budget, and the
// sender's rnr_retry (1..6; 7 would mean "forever") for its own budget given the peer's timer.
std::uint8_t rnr_timer_for(std::chrono::milliseconds budget) noexcept;
std::chrono::microseconds rnr_timer_duration(std::uint8_t code) noexcept;
std::uint8_t rnr_retry_for(std::chrono::milliseconds budget, std::uint8_t peer_timer_code) noexcept;

// ---- GIDs ----
enum class GidType : std::uint8_t { IB, RoCEv1, RoCEv2 };
std::string to_string(GidType type);
using Gid = std::array<std::uint8_t, 16>;

struct GidEntry {
  std::uint32_t index = 0;
  Gid gid{};
  GidType type = GidType::IB;
};

bool is_zero(const Gid& gid) noexcept;
// ::ffff:a.b.c.d; the IPv4 address in host order when it is one.
std::optional<std::uint32_t> ipv4_of(const Gid& gid) noexcept;
std::string gid_text(const Gid& gid);  // "fe80:0000:...": sysfs's format

// The GID a connection uses when option gid_index is unset: on IB the first valid one; on RoCE a RoCEv2
// GID, IPv4-mapped first (it follows IP routing, which is how rdma_cm and routed fabrics reach peers),
// then any RoCEv2, then RoCEv1. Index 0 is a MAC-derived link-local GID on RoCE: never chosen blindly.
// nullopt when no entry fits.
std::optional<GidEntry> choose_gid(std::span<const GidEntry> gids, bool ethernet) noexcept;

}  // namespace rdmakit::verbs_impl
