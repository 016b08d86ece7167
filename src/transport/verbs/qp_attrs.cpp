#include "transport/verbs/qp_attrs.hpp"

#include <cstring>

namespace rdmakit::verbs_impl {

QpTransition init_transition(std::uint8_t port) noexcept {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_INIT;
  t.attr.pkey_index = 0;
  t.attr.port_num = port;
  // Every right the QP may need; each region's own rights are what the responder checks.
  t.attr.qp_access_flags =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return t;
}

QpTransition rtr_transition(const QpPlan& plan) noexcept {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTR;
  t.attr.path_mtu = plan.agreed.mtu;
  t.attr.dest_qp_num = plan.peer.qpn;
  t.attr.rq_psn = plan.peer.psn;
  t.attr.max_dest_rd_atomic = plan.local.max_rd_atomic;
  // min_rnr_timer is the responder's: how long the peer backs off when we have no receive posted.
  t.attr.min_rnr_timer = plan.local.rnr_timer;
  // Always with a GRH: required on RoCE (the GID is the address), harmless on IB.
  t.attr.ah_attr.is_global = 1;
  std::memcpy(t.attr.ah_attr.grh.dgid.raw, plan.peer.gid.data(), 16);
  t.attr.ah_attr.grh.sgid_index = plan.sgid_index;
  t.attr.ah_attr.grh.hop_limit = 64;
  t.attr.ah_attr.dlid = plan.peer.lid;
  t.attr.ah_attr.port_num = plan.port;
  t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

QpTransition rts_transition(const QpPlan& plan) noexcept {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTS;
  t.attr.sq_psn = plan.local.psn;
  t.attr.timeout = plan.local.timeout;
  t.attr.retry_cnt = plan.local.retry_cnt;
  t.attr.rnr_retry = plan.rnr_retry;
  t.attr.max_rd_atomic = plan.agreed.max_rd_atomic;
  t.mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

QpTransition error_transition() noexcept {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_ERR;
  t.mask = IBV_QP_STATE;
  return t;
}

}  // namespace rdmakit::verbs_impl
