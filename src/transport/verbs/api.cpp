#include "transport/verbs/api.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>

namespace rdmakit::verbs_impl {
namespace {

std::string dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown dlopen error";
}

// Resolves `name` in `handle` into `slot`; a missing required symbol fails the whole load.
template <typename Fn>
bool resolve(void* handle, const char* name, Fn& slot, std::string& missing) {
  slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (!slot && missing.empty()) missing = name;
  return slot != nullptr;
}

void resolve_verbs(void* h, Api& a, std::string& missing) {
  resolve(h, "ibv_get_device_list", a.get_device_list, missing);
  resolve(h, "ibv_free_device_list", a.free_device_list, missing);
  resolve(h, "ibv_get_device_name", a.get_device_name, missing);
  resolve(h, "ibv_open_device", a.open_device, missing);
  resolve(h, "ibv_close_device", a.close_device, missing);
  resolve(h, "ibv_query_device", a.query_device, missing);
  resolve(h, "ibv_query_port", a.query_port_compat, missing);
  resolve(h, "ibv_query_gid", a.query_gid, missing);
  resolve(h, "ibv_alloc_pd", a.alloc_pd, missing);
  resolve(h, "ibv_dealloc_pd", a.dealloc_pd, missing);
  resolve(h, "ibv_reg_mr", a.reg_mr, missing);
  resolve(h, "ibv_dereg_mr", a.dereg_mr, missing);
  resolve(h, "ibv_create_comp_channel", a.create_comp_channel, missing);
  resolve(h, "ibv_destroy_comp_channel", a.destroy_comp_channel, missing);
  resolve(h, "ibv_create_cq", a.create_cq, missing);
  resolve(h, "ibv_destroy_cq", a.destroy_cq, missing);
  resolve(h, "ibv_get_cq_event", a.get_cq_event, missing);
  resolve(h, "ibv_ack_cq_events", a.ack_cq_events, missing);
  resolve(h, "ibv_create_qp", a.create_qp, missing);
  resolve(h, "ibv_modify_qp", a.modify_qp, missing);
  resolve(h, "ibv_destroy_qp", a.destroy_qp, missing);
  resolve(h, "ibv_wc_status_str", a.wc_status_str, missing);
  std::string optional;
  resolve(h, "_ibv_query_gid_ex", a.query_gid_ex, optional);
  resolve(h, "ibv_get_async_event", a.get_async_event, optional);
  resolve(h, "ibv_ack_async_event", a.ack_async_event, optional);  // older rdma-core: GID types from sysfs
}

void resolve_cm(void* h, Api& a, std::string& missing) {
  resolve(h, "rdma_create_event_channel", a.create_event_channel, missing);
  resolve(h, "rdma_destroy_event_channel", a.destroy_event_channel, missing);
  resolve(h, "rdma_create_id", a.create_id, missing);
  resolve(h, "rdma_destroy_id", a.destroy_id, missing);
  resolve(h, "rdma_bind_addr", a.bind_addr, missing);
  resolve(h, "rdma_resolve_addr", a.resolve_addr, missing);
  resolve(h, "rdma_resolve_route", a.resolve_route, missing);
  resolve(h, "rdma_connect", a.connect, missing);
  resolve(h, "rdma_establish", a.establish, missing);
  resolve(h, "rdma_listen", a.listen, missing);
  resolve(h, "rdma_accept", a.accept, missing);
  resolve(h, "rdma_reject", a.reject, missing);
  resolve(h, "rdma_disconnect", a.disconnect, missing);
  resolve(h, "rdma_get_cm_event", a.get_cm_event, missing);
  resolve(h, "rdma_ack_cm_event", a.ack_cm_event, missing);
  resolve(h, "rdma_migrate_id", a.migrate_id, missing);
  resolve(h, "rdma_init_qp_attr", a.init_qp_attr, missing);
  resolve(h, "rdma_get_src_port", a.get_src_port, missing);
  resolve(h, "rdma_event_str", a.event_str, missing);
}

std::unexpected<Error> unavailable(std::string what) {
  return fail(Errc::Unavailable, "verbs transport: " + what + "; " + std::string(kInstallHint));
}

}  // namespace

Result<const Api*> load_api_from(std::string_view verbs_library, std::string_view cm_library) {
  // RTLD_GLOBAL: providers (librxe-rdmav34.so, libmlx5...) are dlopen'ed by libibverbs and bind to its
  // private symbols; the handles stay open for the life of the process, as the table points into them.
  void* verbs = dlopen(std::string(verbs_library).c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!verbs) return unavailable("cannot load " + std::string(verbs_library) + " (" + dl_error() + ")");
  void* cm = dlopen(std::string(cm_library).c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!cm) return unavailable("cannot load " + std::string(cm_library) + " (" + dl_error() + ")");
  auto* api = new Api{};  // lives as long as the process, like the library handles
  std::string missing;
  resolve_verbs(verbs, *api, missing);
  resolve_cm(cm, *api, missing);
  if (!missing.empty()) {
    delete api;
    return unavailable("symbol " + missing + " is missing from the installed rdma-core (too old?)");
  }
  return api;
}

Result<const Api*> load_api() {
  static std::once_flag once;
  static Result<const Api*> loaded = fail(Errc::Unavailable, "not loaded");
  std::call_once(once, [] { loaded = load_api_from("libibverbs.so.1", "librdmacm.so.1"); });
  return loaded;
}

int query_port(const Api& api, ibv_context* context, std::uint8_t port, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  // Same logic as verbs.h's ___ibv_query_port: the extended op when the provider has it.
  if (verbs_context* vctx = verbs_get_ctx_op(context, query_port))
    return vctx->query_port(context, port, attr, sizeof(*attr));
  return api.query_port_compat(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

}  // namespace rdmakit::verbs_impl
