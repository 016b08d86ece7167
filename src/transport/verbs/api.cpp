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

// Resolves `name` at symbol version `version` in `handle` into `slot`; a missing required symbol fails the
// whole load. dlvsym, not dlsym: rdma-core keeps old ABIs of the same name (ibv_create_qp is exported at
// IBVERBS_1.0, the pre-2006 compat layout, and IBVERBS_1.1), and the version pins the one whose types are
// those of the headers we compiled against, as a program linked against rdma-core would record it. The
// versions are those rdma-core declares (libibverbs.map.in, librdmacm.map.in; `objdump -T`), the oldest
// that has the function with today's signature. No dlsym fallback: rdma-core versions every exported
// function (its .map files), so only a library that is not rdma-core's lacks them, and such a library's
// layouts are not ones we may assume: it is refused, naming the symbol and version it lacks.
template <typename Fn>
bool resolve(void* handle, const char* name, const char* version, Fn& slot, std::string& missing) {
  slot = reinterpret_cast<Fn>(dlvsym(handle, name, version));
  if (!slot && missing.empty()) missing = std::string(name) + "@" + version;
  return slot != nullptr;
}

constexpr const char* kVerbs11 = "IBVERBS_1.1";
constexpr const char* kVerbs10 = "IBVERBS_1.0";  // functions with no compat version: 1.0 is the current one

void resolve_verbs(void* h, Api& a, std::string& missing) {
  resolve(h, "ibv_get_device_list", kVerbs11, a.get_device_list, missing);
  resolve(h, "ibv_free_device_list", kVerbs11, a.free_device_list, missing);
  resolve(h, "ibv_get_device_name", kVerbs11, a.get_device_name, missing);
  resolve(h, "ibv_open_device", kVerbs11, a.open_device, missing);
  resolve(h, "ibv_close_device", kVerbs11, a.close_device, missing);
  resolve(h, "ibv_query_device", kVerbs11, a.query_device, missing);
  resolve(h, "ibv_query_port", kVerbs11, a.query_port_compat, missing);
  resolve(h, "ibv_query_gid", kVerbs11, a.query_gid, missing);
  resolve(h, "ibv_alloc_pd", kVerbs11, a.alloc_pd, missing);
  resolve(h, "ibv_dealloc_pd", kVerbs11, a.dealloc_pd, missing);
  resolve(h, "ibv_reg_mr", kVerbs11, a.reg_mr, missing);
  resolve(h, "ibv_dereg_mr", kVerbs11, a.dereg_mr, missing);
  resolve(h, "ibv_create_comp_channel", kVerbs10, a.create_comp_channel, missing);
  resolve(h, "ibv_destroy_comp_channel", kVerbs10, a.destroy_comp_channel, missing);
  resolve(h, "ibv_create_cq", kVerbs11, a.create_cq, missing);
  resolve(h, "ibv_destroy_cq", kVerbs11, a.destroy_cq, missing);
  resolve(h, "ibv_get_cq_event", kVerbs11, a.get_cq_event, missing);
  resolve(h, "ibv_ack_cq_events", kVerbs11, a.ack_cq_events, missing);
  resolve(h, "ibv_create_qp", kVerbs11, a.create_qp, missing);
  resolve(h, "ibv_modify_qp", kVerbs11, a.modify_qp, missing);
  resolve(h, "ibv_destroy_qp", kVerbs11, a.destroy_qp, missing);
  resolve(h, "ibv_wc_status_str", kVerbs11, a.wc_status_str, missing);
  std::string optional;
  resolve(h, "_ibv_query_gid_ex", "IBVERBS_1.11", a.query_gid_ex, optional);  // older: GID types from sysfs
  resolve(h, "ibv_get_async_event", kVerbs11, a.get_async_event, optional);
  resolve(h, "ibv_ack_async_event", kVerbs11, a.ack_async_event, optional);
  resolve(h, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", a.reg_dmabuf_mr, optional);  // GPUDirect over dmabuf
}

constexpr const char* kCm10 = "RDMACM_1.0";

void resolve_cm(void* h, Api& a, std::string& missing) {
  resolve(h, "rdma_create_event_channel", kCm10, a.create_event_channel, missing);
  resolve(h, "rdma_destroy_event_channel", kCm10, a.destroy_event_channel, missing);
  resolve(h, "rdma_create_id", kCm10, a.create_id, missing);
  resolve(h, "rdma_destroy_id", kCm10, a.destroy_id, missing);
  resolve(h, "rdma_bind_addr", kCm10, a.bind_addr, missing);
  resolve(h, "rdma_resolve_addr", kCm10, a.resolve_addr, missing);
  resolve(h, "rdma_resolve_route", kCm10, a.resolve_route, missing);
  resolve(h, "rdma_connect", kCm10, a.connect, missing);
  resolve(h, "rdma_establish", "RDMACM_1.2", a.establish, missing);
  resolve(h, "rdma_listen", kCm10, a.listen, missing);
  resolve(h, "rdma_accept", kCm10, a.accept, missing);
  resolve(h, "rdma_reject", kCm10, a.reject, missing);
  resolve(h, "rdma_disconnect", kCm10, a.disconnect, missing);
  resolve(h, "rdma_get_cm_event", kCm10, a.get_cm_event, missing);
  resolve(h, "rdma_ack_cm_event", kCm10, a.ack_cm_event, missing);
  resolve(h, "rdma_migrate_id", kCm10, a.migrate_id, missing);
  resolve(h, "rdma_init_qp_attr", "RDMACM_1.2", a.init_qp_attr, missing);
  resolve(h, "rdma_get_src_port", kCm10, a.get_src_port, missing);
  resolve(h, "rdma_event_str", kCm10, a.event_str, missing);
}

std::unexpected<Error> unavailable(std::string what) {
  return fail(Errc::Unavailable, "verbs transport: " + what + "; " + std::string(kInstallHint));
}

}  // namespace

Result<const Api*> load_api_from(std::string_view verbs_library, std::string_view cm_library) {
  // RTLD_LOCAL: nothing needs rdma-core's symbols in the global scope. The providers libibverbs dlopens
  // (librxe-rdmav34.so, libmlx5...) and librdmacm each name libibverbs.so.1 as DT_NEEDED, so they bind to
  // its private symbols (IBVERBS_PRIVATE_*) through their own dependencies, as in NCCL's loader; and the
  // user's own libibverbs, if any, is not shadowed or preempted by ours. The handles stay open for the life
  // of the process, as the table points into them.
  void* verbs = dlopen(std::string(verbs_library).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!verbs) return unavailable("cannot load " + std::string(verbs_library) + " (" + dl_error() + ")");
  void* cm = dlopen(std::string(cm_library).c_str(), RTLD_NOW | RTLD_LOCAL);
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
