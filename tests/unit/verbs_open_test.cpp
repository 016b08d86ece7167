// Opening the verbs transport where there may be no RDMA at all: a clear Errc::Unavailable naming what
// to install or create, never a crash; other transports never need rdma-core. Plus the work-completion
// translation, with synthetic completions.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "rdmakit/context.hpp"
#include "rdmakit/verbs.hpp"
#include "transport/verbs/api.hpp"
#include "transport/verbs/cq.hpp"

namespace rdmakit {
namespace {

TEST(VerbsOpen, MissingLibraryNamesThePackages) {
  auto api = verbs_impl::load_api_from("libibverbs-does-not-exist.so.1", "librdmacm.so.1");
  ASSERT_FALSE(api);
  EXPECT_EQ(api.error().code(), Errc::Unavailable);
  EXPECT_NE(api.error().message().find("libibverbs-does-not-exist.so.1"), std::string::npos);
  EXPECT_NE(api.error().message().find("libibverbs1 librdmacm1 ibverbs-providers"), std::string::npos)
      << api.error().message();
}

// rdma-core is loaded privately (RTLD_LOCAL) and each function at the symbol version of the headers we
// compiled against: ibv_create_qp is the IBVERBS_1.1 one, not the pre-1.1 compat entry point that plain dlsym
// could also have returned on another rdma-core, and none of rdma-core's names lands in the global scope,
// where it would preempt the user's own libibverbs.
TEST(VerbsOpen, LoadsPrivatelyAtTheHeadersSymbolVersions) {
  auto api = verbs_impl::load_api();
  if (!api) GTEST_SKIP() << "rdma-core is not installed: " << api.error().message();
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(verbs, nullptr) << "load_api() succeeded but libibverbs.so.1 is not loaded";
  EXPECT_EQ(reinterpret_cast<void*>((*api)->create_qp), dlvsym(verbs, "ibv_create_qp", "IBVERBS_1.1"));
  EXPECT_NE(reinterpret_cast<void*>((*api)->create_qp), dlvsym(verbs, "ibv_create_qp", "IBVERBS_1.0"));
  EXPECT_EQ(reinterpret_cast<void*>((*api)->reg_mr), dlvsym(verbs, "ibv_reg_mr", "IBVERBS_1.1"));
  void* cm = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(cm, nullptr);
  EXPECT_EQ(reinterpret_cast<void*>((*api)->establish), dlvsym(cm, "rdma_establish", "RDMACM_1.2"));
  dlclose(verbs);
  dlclose(cm);
  // RTLD_GLOBAL would make these visible to every later lookup in the process.
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "ibv_get_device_list"), nullptr);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "rdma_create_id"), nullptr);
}

TEST(VerbsOpen, NoDeviceIsUnavailableWithAHint) {
  auto devices = verbs::list_devices();
  if (devices && !devices->empty()) GTEST_SKIP() << "this machine has RDMA devices";
  auto context = Context::open({.transport = "verbs"});
  ASSERT_FALSE(context);
  EXPECT_EQ(context.error().code(), Errc::Unavailable);
  if (devices) {  // rdma-core is there, the kernel has no device
    EXPECT_NE(context.error().message().find("rdma link add"), std::string::npos)
        << context.error().message();
  }
}

TEST(VerbsOpen, UnknownDeviceIsNamed) {
  auto devices = verbs::list_devices();
  if (!devices || devices->empty()) GTEST_SKIP() << "needs an RDMA device";
  auto context = Context::open(Options{.transport = "verbs"}.set("device", "no-such-device"));
  ASSERT_FALSE(context);
  EXPECT_EQ(context.error().code(), Errc::NotFound);
  EXPECT_NE(context.error().message().find("no-such-device"), std::string::npos);
}

TEST(VerbsOpen, CacheStatsOfAnotherTransportIsAnError) {
  auto context = Context::open({.transport = "tcp"});
  if (!context) GTEST_SKIP() << context.error().describe();
  auto stats = verbs::registration_cache_stats(**context);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code(), Errc::InvalidArgument);
}

std::uint64_t id_of(std::uint32_t connection, std::uint64_t sequence, bool recv) {
  return (std::uint64_t{connection} << 40) | (recv ? Connection::kRecvBit : 0) | sequence;
}

TEST(VerbsCompletion, SendSideUsesThePostedOpcode) {
  ibv_wc wc{};
  wc.wr_id = id_of(7, 3, false);
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RDMA_WRITE;  // what a WRITE-with-immediate completes as
  auto c = verbs_impl::to_completion(wc, Opcode::WriteImm);
  EXPECT_EQ(c.id, wc.wr_id);
  EXPECT_EQ(c.connection, 7u);
  EXPECT_EQ(c.opcode, Opcode::WriteImm);
  EXPECT_TRUE(c.ok());

  wc.status = IBV_WC_REM_ACCESS_ERR;
  wc.opcode = static_cast<ibv_wc_opcode>(0xff);  // undefined on error
  c = verbs_impl::to_completion(wc, Opcode::Read);
  EXPECT_EQ(c.status, Status::RemoteAccess);
  EXPECT_EQ(c.opcode, Opcode::Read);

  wc.status = IBV_WC_SUCCESS;
  c = verbs_impl::to_completion(wc, Opcode::FetchAdd);
  EXPECT_EQ(c.bytes, 8u);
}

TEST(VerbsCompletion, ReceiveSide) {
  ibv_wc wc{};
  wc.wr_id = id_of(2, 9, true);
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  wc.wc_flags = IBV_WC_WITH_IMM;
  wc.imm_data = htonl(0xdeadbeef);
  wc.byte_len = 4096;
  auto c = verbs_impl::to_completion(wc, Opcode::Write);
  EXPECT_EQ(c.opcode, Opcode::RecvWriteImm);
  EXPECT_TRUE(c.has_imm);
  EXPECT_EQ(c.imm, 0xdeadbeefu);
  EXPECT_EQ(c.bytes, 4096u);
  EXPECT_EQ(c.connection, 2u);

  wc.status = IBV_WC_WR_FLUSH_ERR;
  c = verbs_impl::to_completion(wc, Opcode::Write);
  EXPECT_EQ(c.opcode, Opcode::Recv);
  EXPECT_EQ(c.status, Status::Flushed);
  EXPECT_FALSE(c.has_imm);
}

}  // namespace
}  // namespace rdmakit
