// The connection handshake carried in rdma_cm private data: each side sends a Hello, both run the same
// negotiate() on (own, peer) and so agree without another round trip. A side that cannot agree rejects
// and puts its own Hello in the reject, so the other side computes the same diagnostic from its own
// point of view. Link parameters are never assumed: a mismatch names the parameter and both values.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "rdmakit/error.hpp"
#include "transport/verbs/mapping.hpp"

namespace rdmakit::verbs_impl {

struct Hello {
  static constexpr std::uint32_t kMagic = 0x52444b56;  // "RDKV"
  static constexpr std::uint8_t kVersion = 1;
  // IB CM REQ private data holds 56 bytes after rdma_cm's header: the whole budget.
  static constexpr std::size_t kSize = 56;
  using Bytes = std::array<std::byte, kSize>;

  std::uint8_t version = kVersion;
  bool mtu_explicit = false;        // option mtu was set: the peer must agree, not just fit
  bool rejected = false;            // sent in a reject: "this is why I said no"
  ibv_mtu mtu = IBV_MTU_1024;       // the MTU this side asks for (option mtu, else its port's active MTU)
  ibv_mtu port_mtu = IBV_MTU_1024;  // the most this side's port can do (its active MTU)
  std::uint64_t context_id = 0;     // hash of the context's name
  std::uint64_t epoch = 0;          // this life of the context (stale-descriptor checks)
  Gid gid{};
  std::uint16_t lid = 0;  // IB only; 0 on RoCE
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;     // 24 bits: the first PSN this side sends
  std::uint8_t timeout = 0;  // this side's ack timeout exponent (its requests)
  std::uint8_t retry_cnt = 0;
  std::uint8_t rnr_timer = 0;      // min_rnr_timer this side's responder advertises
  std::uint8_t rnr_retry = 0;      // this side's retries (informational)
  std::uint8_t max_rd_atomic = 0;  // outstanding READs/atomics this side can take as responder

  Bytes encode() const noexcept;
  // Accepts longer buffers (the CM pads private data with zeros); rejects wrong magic or version.
  static Result<Hello> decode(std::span<const std::byte> bytes);
};

struct Negotiated {
  ibv_mtu mtu;
  std::uint8_t max_rd_atomic;
};

// The same answer on both sides (swap the arguments); a mismatch is Errc::ConnectionRefused whose
// message names the parameter, both values and the option that sets it.
Result<Negotiated> negotiate(const Hello& local, const Hello& peer);

}  // namespace rdmakit::verbs_impl
