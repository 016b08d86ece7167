// The attribute tables of the RC queue pair's INIT -> RTR -> RTS transitions, as plain functions of the
// negotiated parameters (unit-tested without a device).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/verbs/handshake.hpp"

namespace rdmakit::verbs_impl {

struct QpTransition {
  ibv_qp_attr attr{};
  int mask = 0;
};

// Everything RTR and RTS need: this side's Hello, the peer's and what they agreed on.
struct QpPlan {
  std::uint8_t port = 1;
  std::uint8_t sgid_index = 0;
  Hello local;
  Hello peer;
  Negotiated agreed{};
  std::uint8_t rnr_retry = 6;  // this side's, from its rnr budget and the peer's timer
};

QpTransition init_transition(std::uint8_t port) noexcept;
QpTransition rtr_transition(const QpPlan& plan) noexcept;
QpTransition rts_transition(const QpPlan& plan) noexcept;
QpTransition error_transition() noexcept;

}  // namespace rdmakit::verbs_impl
