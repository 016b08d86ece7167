// The libibverbs and librdmacm functions rdmakit calls, loaded with dlopen when the verbs transport is
// first opened. The library is never linked against rdma-core, so a program that uses only tcp or shm
// runs on a machine without it. The headers are used for types and for the static inline verbs
// (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq...), which go through the provider's ops table and
// need no symbol; every exported function comes through this table.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <initializer_list>
#include <string_view>

#include "rdmakit/error.hpp"

namespace rdmakit::verbs_impl {

struct Api {
  // libibverbs
  decltype(&::ibv_get_device_list) get_device_list;
  decltype(&::ibv_free_device_list) free_device_list;
  decltype(&::ibv_get_device_name) get_device_name;
  decltype(&::ibv_open_device) open_device;
  decltype(&::ibv_close_device) close_device;
  decltype(&::ibv_query_device) query_device;
  decltype(&::ibv_query_port) query_port_compat;  // fallback for providers without the extended op
  decltype(&::ibv_query_gid) query_gid;
  decltype(&::_ibv_query_gid_ex) query_gid_ex;  // optional (rdma-core >= 32): nullptr when absent
  decltype(&::ibv_alloc_pd) alloc_pd;
  decltype(&::ibv_dealloc_pd) dealloc_pd;
  decltype(&::ibv_reg_mr) reg_mr;
  decltype(&::ibv_dereg_mr) dereg_mr;
  // Optional (rdma-core >= 34, IBVERBS_1.12): nullptr when absent, then no GPUDirect over dmabuf.
  decltype(&::ibv_reg_dmabuf_mr) reg_dmabuf_mr;
  decltype(&::ibv_create_comp_channel) create_comp_channel;
  decltype(&::ibv_destroy_comp_channel) destroy_comp_channel;
  decltype(&::ibv_create_cq) create_cq;
  decltype(&::ibv_destroy_cq) destroy_cq;
  decltype(&::ibv_get_cq_event) get_cq_event;
  decltype(&::ibv_ack_cq_events) ack_cq_events;
  decltype(&::ibv_get_async_event) get_async_event;  // optional: nullptr when absent (overflow goes unseen)
  decltype(&::ibv_ack_async_event) ack_async_event;
  decltype(&::ibv_create_qp) create_qp;
  decltype(&::ibv_modify_qp) modify_qp;
  decltype(&::ibv_destroy_qp) destroy_qp;
  decltype(&::ibv_wc_status_str) wc_status_str;
  // librdmacm
  decltype(&::rdma_create_event_channel) create_event_channel;
  decltype(&::rdma_destroy_event_channel) destroy_event_channel;
  decltype(&::rdma_create_id) create_id;
  decltype(&::rdma_destroy_id) destroy_id;
  decltype(&::rdma_bind_addr) bind_addr;
  decltype(&::rdma_resolve_addr) resolve_addr;
  decltype(&::rdma_resolve_route) resolve_route;
  decltype(&::rdma_connect) connect;
  decltype(&::rdma_establish) establish;
  decltype(&::rdma_listen) listen;
  decltype(&::rdma_accept) accept;
  decltype(&::rdma_reject) reject;
  decltype(&::rdma_disconnect) disconnect;
  decltype(&::rdma_get_cm_event) get_cm_event;
  decltype(&::rdma_ack_cm_event) ack_cm_event;
  decltype(&::rdma_migrate_id) migrate_id;
  decltype(&::rdma_init_qp_attr) init_qp_attr;
  decltype(&::rdma_get_src_port) get_src_port;
  decltype(&::rdma_event_str) event_str;
};

// What to install when the libraries are missing (Debian names).
inline constexpr std::string_view kInstallHint =
    "install rdma-core's libraries (Debian: apt-get install libibverbs1 librdmacm1 ibverbs-providers)";

// Loads the libraries once per process (thread-safe) and returns the table, or Errc::Unavailable naming
// the library or symbol that is missing and the packages to install. Never unloaded.
Result<const Api*> load_api();

// The loading itself, with the library names as parameters so tests can provoke a missing library.
Result<const Api*> load_api_from(std::string_view verbs_library, std::string_view cm_library);

// ibv_query_port without the static inline wrapper (which would reference the exported symbol).
int query_port(const Api& api, ibv_context* context, std::uint8_t port, ibv_port_attr* attr);

}  // namespace rdmakit::verbs_impl
