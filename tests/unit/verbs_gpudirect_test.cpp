// The verbs transport's GPUDirect probe (src/transport/verbs/gpudirect.hpp), each branch with injected
// inputs: no NIC, GPU or kernel module is needed. What the NIC answers to ibv_reg_dmabuf_mr with fd -1, what
// the CUDA driver says of CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED and which peer-memory modules the sysfs tree
// shows decide the path; without one, a device region offered for remote access is refused naming what is
// missing. The staged path itself runs in the Soft-RoCE VM (DeviceConformance.*/verbs).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "transport/verbs/api.hpp"
#include "transport/verbs/gpudirect.hpp"

namespace rdmakit::verbs_impl {
namespace {

class GpuDirectProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rdmakit-sysfs-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void module(const std::string& path) { std::filesystem::create_directories(root_ + path); }
  GpuDirectInputs inputs(int nic_errno, std::optional<int> driver) {
    GpuDirectInputs in;
    in.nic_dmabuf_errno = [nic_errno] { return nic_errno; };
    in.driver_dmabuf = [this, driver](int device) {
      ++driver_asked_;
      asked_device_ = device;
      return driver;
    };
    in.sysfs_root = root_;
    return in;
  }
  std::string root_;
  int driver_asked_ = 0;
  int asked_device_ = -1;
};

TEST_F(GpuDirectProbeTest, DmabufWhenTheNicSaysEbadfAndTheDriverSupportsIt) {
  module("/sys/module/nvidia_peermem");  // dmabuf is preferred over peer memory
  auto probe = probe_gpudirect(inputs(EBADF, 1), 2);
  EXPECT_EQ(probe.path, GpuDirect::Dmabuf) << probe.detail;
  EXPECT_EQ(asked_device_, 2) << "the driver must be asked about the region's device";
}

TEST_F(GpuDirectProbeTest, DriverWithoutDmabufFallsBackToPeerMemoryOnlyWhenAModuleIsLoaded) {
  auto none = probe_gpudirect(inputs(EBADF, 0), 0);
  EXPECT_EQ(none.path, GpuDirect::None);
  EXPECT_NE(none.detail.find("CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0"), std::string::npos) << none.detail;
  module("/sys/module/nvidia_peermem");
  auto peer = probe_gpudirect(inputs(EBADF, 0), 0);
  EXPECT_EQ(peer.path, GpuDirect::Peermem) << peer.detail;
  EXPECT_NE(peer.detail.find("nvidia_peermem"), std::string::npos) << peer.detail;
}

TEST_F(GpuDirectProbeTest, MellanoxNvMemPeerClientCountsAsPeerMemory) {
  module("/sys/kernel/mm/memory_peers/nv_mem");
  auto probe = probe_gpudirect(inputs(EOPNOTSUPP, std::nullopt), 0);
  EXPECT_EQ(probe.path, GpuDirect::Peermem) << probe.detail;
}

TEST_F(GpuDirectProbeTest, NicWithoutDmabufNeverAsksTheDriverAndNamesWhatIsMissing) {
  for (int nic : {EOPNOTSUPP, ENOSYS}) {
    auto probe = probe_gpudirect(inputs(nic, 1), 0);
    EXPECT_EQ(probe.path, GpuDirect::None) << nic;
    EXPECT_NE(probe.detail.find("ibv_reg_dmabuf_mr"), std::string::npos) << probe.detail;
    EXPECT_NE(probe.detail.find("nvidia_peermem"), std::string::npos) << probe.detail;
  }
  // Asking would load CUDA in a process that may never use a GPU: only a NIC with dmabuf makes it worth it.
  EXPECT_EQ(driver_asked_, 0);
  // A driver that cannot be asked (not installed) is no dmabuf support either.
  auto unasked = probe_gpudirect(inputs(EBADF, std::nullopt), 0);
  EXPECT_EQ(unasked.path, GpuDirect::None);
  EXPECT_NE(unasked.detail.find("could not be asked"), std::string::npos) << unasked.detail;
}

TEST_F(GpuDirectProbeTest, RemoteAccessToStagedDeviceMemoryIsRefusedNamingTheMissingDrivers) {
  auto probe = probe_gpudirect(inputs(EOPNOTSUPP, std::nullopt), 0);
  Error refused = remote_device_memory_refused(probe, 3, Access::LocalWrite | Access::RemoteWrite);
  EXPECT_EQ(refused.code(), Errc::NotSupported);
  for (const char* needed : {"verbs", "device 3", "remote access", "nvidia_peermem", "dmabuf", "LocalWrite"})
    EXPECT_NE(refused.message().find(needed), std::string::npos) << needed << " in: " << refused.message();
}

// The dmabuf probe calls ibv_reg_dmabuf_mr through the loader's table: resolved at its own symbol version
// where rdma-core has it (>= 34; Debian 12 has 44), optional (null) elsewhere rather than failing the load.
TEST(GpuDirectLoader, RegDmabufMrIsResolvedAtItsVersion) {
  auto api = load_api();
  if (!api) GTEST_SKIP() << "rdma-core is not installed: " << api.error().message();
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(verbs, nullptr);
  void* expected = dlvsym(verbs, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
  dlclose(verbs);
  if (!expected) GTEST_SKIP() << "this rdma-core predates ibv_reg_dmabuf_mr";
  EXPECT_EQ(reinterpret_cast<void*>((*api)->reg_dmabuf_mr), expected);
}

}  // namespace
}  // namespace rdmakit::verbs_impl
