// The transport registry: every transport CMake built is listed and opens by its name; an unknown or unbuilt
// name is NotSupported naming those built. Also linked against the static archive (unit_registry_static),
// where a transport whose object files nothing references would be lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "rdmakit/context.hpp"
#include "rdmakit/transports.hpp"

namespace rdmakit {
namespace {

// "tcp,shm,verbs,fault": the transports CMake built (RDMAKIT_WITH_<NAME>).
std::vector<std::string> expected_transports() {
  std::vector<std::string> names;
  std::stringstream list(RDMAKIT_EXPECTED_TRANSPORTS);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  return names;
}

bool built(const std::string& name) {
  auto names = expected_transports();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(Registry, ListsExactlyTheBuiltTransports) {
  std::vector<std::string> names;
  for (const auto& info : built_transports()) {
    names.push_back(info.name);
    EXPECT_FALSE(info.summary.empty()) << info.name;
    EXPECT_EQ(info.wraps_inner, info.name == "fault") << info.name;
    EXPECT_EQ(info.picks_device, info.name == "verbs") << info.name;
  }
  EXPECT_EQ(names, expected_transports());
}

TEST(Registry, EveryBuiltTransportOpensByItsName) {
  for (const auto& info : built_transports()) {
    if (info.picks_device) continue;  // needs a device (RDMA): the Soft-RoCE VM's tests open it
    std::string name = info.wraps_inner ? info.name + ":tcp" : info.name;
    auto context = Context::open({.transport = name});
    ASSERT_TRUE(context.has_value()) << name << ": " << context.error().describe();
    EXPECT_EQ((*context)->transport(), name);
  }
}

TEST(Registry, UnknownNameIsNotSupportedListingTheBuiltOnes) {
  // The transport opened, and the name the error quotes (fault:tpc fails opening its inner transport;
  // without the fault transport, fault:tpc itself is unknown).
  const std::string fault_tpc = built("fault") ? "'tpc'" : "'fault:tpc'";
  const std::pair<std::string, std::string> cases[] = {
      {"tpc", "'tpc'"}, {"fault:tpc", fault_tpc}, {"rxe", "'rxe'"}, {":tcp", "':tcp'"}};
  for (const auto& [name, quoted] : cases) {
    auto context = Context::open({.transport = name});
    ASSERT_FALSE(context.has_value()) << name;
    EXPECT_EQ(context.error().code(), Errc::NotSupported) << context.error().describe();
    const std::string& message = context.error().message();
    EXPECT_NE(message.find(quoted), std::string::npos) << message;
    for (const auto& built : expected_transports())
      EXPECT_NE(message.find(built == "fault" ? "fault:<inner>" : built), std::string::npos) << message;
  }
}

// Runs in builds that leave a transport out (-DRDMAKIT_WITH_<NAME>=OFF).
TEST(Registry, AnUnbuiltTransportIsNotSupportedListingTheBuiltOnes) {
  if (built("shm") && built("verbs") && built("fault")) GTEST_SKIP() << "every transport is built";
  for (std::string name : {"shm", "verbs", "fault:tcp"}) {
    if (built(name.substr(0, name.find(':')))) continue;
    auto context = Context::open({.transport = name});
    ASSERT_FALSE(context.has_value()) << name;
    EXPECT_EQ(context.error().code(), Errc::NotSupported) << context.error().describe();
    EXPECT_NE(context.error().message().find("built: tcp"), std::string::npos) << context.error().message();
  }
}

TEST(Registry, WrapperNeedsAnInnerTransportAndOthersTakeNone) {
  if (!built("fault")) GTEST_SKIP() << "the fault transport (the only wrapper) is not built";
  auto no_inner = Context::open({.transport = "fault:"});
  auto bare = Context::open({.transport = "fault"});
  auto tcp_inner = Context::open({.transport = "tcp:shm"});
  for (const auto* result : {&no_inner, &bare, &tcp_inner}) {
    ASSERT_FALSE(result->has_value());
    EXPECT_EQ(result->error().code(), Errc::InvalidArgument) << result->error().describe();
  }
  EXPECT_NE(no_inner.error().message().find("fault:<inner>"), std::string::npos)
      << no_inner.error().message();
}

}  // namespace
}  // namespace rdmakit
